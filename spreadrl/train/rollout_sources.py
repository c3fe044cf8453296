"""The synchronous rollout source: each step sampled in the loop, with the current weights.

:class:`SyncRollouts` samples each step in the loop while the trainer waits; the
asynchronous source (:class:`spreadrl.train.async_steps.AsyncSteps`,
``rollout.max_staleness`` > 0) samples the next steps in a producer thread during
the update. The recipe (:func:`spreadrl.train.grpo.open_rollout_source`) builds
one or the other from the same parts (the prompt order, the rollout engine, the
held-out set), so its loop is one loop for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn
from torch.optim import Optimizer

from spreadrl.rollout.engine import RolloutEngine
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.types import Trajectory
from spreadrl.train.batching import Sample
from spreadrl.train.distributed import release_for_generation
from spreadrl.train.held_out import HeldOut
from spreadrl.train.memory import PeakMemory
from spreadrl.train.rollout_backend import generating
from spreadrl.train.sampler import EpochShuffle
from spreadrl.train.step_source import StepRollouts


@dataclass
class SyncRollouts:
    """The rollout source of the synchronous loop (a :class:`~spreadrl.train.step_source.StepSource`):
    each step samples with the current weights, the trainer waiting.

    Before a rollout phase the update's memory is handed back (gradients freed,
    shards only, the allocator's cache emptied), then the engine wakes
    (:func:`generating`)."""

    collect: Callable[[Policy, int], StepRollouts]
    sampler: EpochShuffle[tuple[str, int]]
    engine: RolloutEngine
    evaluation: HeldOut
    model: nn.Module
    optimizer: Optimizer
    memory: PeakMemory
    device: str
    compute_dtype: str

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        release_for_generation(self.model, self.optimizer, self.device)
        self.memory.reset()
        with generating(self.model, self.engine, self.compute_dtype):
            rollouts = self.collect(self.engine.policy, step)
        return rollouts, self.sampler.state()

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        return {}  # every sample is on-policy: nothing to record

    def updated(self, step: int, model: nn.Module, start: float) -> dict[str, float]:
        return {}  # the next step samples with the updated weights in any case

    def held_out(self, step: int) -> dict[str, float]:
        return self.evaluation.run_if_due(step, self.engine)

    def stop(self) -> None:
        pass  # nothing runs ahead

    def close(self) -> None:
        pass  # owns nothing: the recipe closes the environments it opened

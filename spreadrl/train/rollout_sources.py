"""Where a GRPO run's rollouts come from: sampled in the loop, or ahead of it.

The synchronous source (:class:`SyncRollouts`) samples each step in the loop
with the current weights while the trainer waits; the asynchronous one
(:class:`spreadrl.train.async_steps.AsyncSteps`, ``rollout.max_staleness`` > 0)
samples the next steps in a producer thread during the update. Both are built
from the same parts (the prompt order, the rollout engine, the held-out set),
by :func:`build_rollout_source`, so the recipe's loop is one loop for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn
from torch.optim import Optimizer
from transformers import PreTrainedTokenizerBase

from spreadrl.rollout.colocate import ColocatedRollouts
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.hf_policy import HFPolicy
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.types import Trajectory
from spreadrl.train.async_steps import AsyncSteps
from spreadrl.train.batching import Sample
from spreadrl.train.distributed import release_for_generation
from spreadrl.train.held_out import HeldOut
from spreadrl.train.memory import PeakMemory
from spreadrl.train.rollout_backend import generating
from spreadrl.train.sampler import EpochShuffle
from spreadrl.train.step_source import StepRollouts, StepSource


def build_rollout_source(
    *,
    rollout: RolloutConfig,
    collect: Callable[[Policy, int], StepRollouts],
    sampler: EpochShuffle[tuple[str, int]],
    policy: Policy,
    colocated: ColocatedRollouts | None,
    held_out: HeldOut,
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: Optimizer,
    memory: PeakMemory,
    device: str,
    compute: str,
    steps: int,
    start: int,
    tis_cap: float,
) -> StepSource:
    """The synchronous source, or with ``rollout.max_staleness`` > 0 the asynchronous one
    (its producer started for steps ``start + 1 .. steps``).

    Asynchronous: rollouts of the next steps overlap the update; the engine, if any, is
    the producer's alone, so the held-out eval samples with the trainer's model (hf)."""
    if not rollout.max_staleness:
        return SyncRollouts(
            collect=collect,
            sampler=sampler,
            policy=policy,
            colocated=colocated,
            evaluation=held_out,
            model=model,
            optimizer=optimizer,
            memory=memory,
            device=device,
            compute=compute,
        )
    engine = colocated.policy if colocated is not None else None  # the same vLLM policy
    batch = rollout.group_size * rollout.prompts_per_step
    eval_policy = policy if engine is None else HFPolicy(model, tokenizer, max_batch_size=batch)
    return AsyncSteps.start(
        rollout,
        model,
        tokenizer,
        engine,
        collect,
        sampler.state,
        held_out,
        eval_policy,
        steps=steps,
        start=start,
        compute=compute,
        tis_cap=tis_cap,
    )


@dataclass
class SyncRollouts:
    """The rollout source of the synchronous loop (a :class:`~spreadrl.train.step_source.StepSource`):
    each step samples with the current weights, the trainer waiting.

    Before a rollout phase the update's memory is handed back (gradients freed,
    shards only, the allocator's cache emptied), then the engine wakes
    (:func:`generating`)."""

    collect: Callable[[Policy, int], StepRollouts]
    sampler: EpochShuffle[tuple[str, int]]
    policy: Policy
    colocated: ColocatedRollouts | None
    evaluation: HeldOut
    model: nn.Module
    optimizer: Optimizer
    memory: PeakMemory
    device: str
    compute: str

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        release_for_generation(self.model, self.optimizer, self.device)
        self.memory.reset()
        with generating(self.model, self.colocated, self.compute):
            rollouts = self.collect(self.policy, step)
        return rollouts, self.sampler.state()

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        return {}  # every sample is on-policy: nothing to record

    def updated(self, step: int, model: nn.Module, start: float) -> dict[str, float]:
        return {}  # the next step samples with the updated weights in any case

    def held_out(self, step: int) -> dict[str, float]:
        return self.evaluation.run_if_due(step, self.policy, self.colocated)

    def stop(self) -> None:
        pass  # nothing runs ahead

    def close(self) -> None:
        pass  # owns nothing: the recipe closes the environments it opened

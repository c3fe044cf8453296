"""The contract between the GRPO recipe's loop and where its rollouts come from.

:func:`spreadrl.train.grpo.train_steps` asks a :class:`StepSource` for each step's
:class:`StepRollouts` and tells it when the update begins and ends; the synchronous
source (:class:`spreadrl.train.sources.SyncRollouts`) and the asynchronous
one (:class:`spreadrl.train.sources.AsyncSteps`) differ only behind these calls.

The synchronous rollout source: each step sampled in the loop, with the current weights.

:class:`SyncRollouts` samples each step in the loop while the trainer waits; the
asynchronous source (:class:`spreadrl.train.sources.AsyncSteps`,
``rollout.max_staleness`` > 0) samples the next steps in a producer thread during
the update. The recipe (:func:`spreadrl.train.grpo.open_rollout_source`) builds
one or the other from the same parts (the prompt order, the rollout engine, the
held-out set), so its loop is one loop for both.

Asynchronous GRPO inside the recipe: the producer, the weight hand-over, what a step
logs. The producer itself is :mod:`spreadrl.train.producer`.

The rollout engine says how the producer samples and how the trainer's weights
reach it (:meth:`spreadrl.rollout.engine.RolloutEngine.producer`):

- hf engine: the producer samples with its own copy of the model (a deep copy
  of the trainer's at start, without gradients), loaded from a snapshot of the
  trainer's weights at each step boundary. Memory: one more copy of the weights,
  plus a snapshot in flight (at most one: a newer one replaces it), so up to
  2 x the weights beside the trainer's model, gradients and optimizer state.
- vLLM engine: the engine's own processes sample; it is not put to sleep between
  steps. The trainer writes its weights as safetensors shards to shared memory
  (the ``files`` sync) at each step boundary; the producer reloads them in place
  between two engine steps, so requests still running continue under the new
  weights. Only the producer's thread touches the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn
from torch.optim import Optimizer
from transformers import PreTrainedTokenizerBase

from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.types import Trajectory
from spreadrl.train.batching import Sample
from spreadrl.train.distributed import release_for_generation
from spreadrl.train.episodes import HeldOut, StepRollouts, generating
from spreadrl.train.logprobs import compute_context
from spreadrl.train.memory import PeakMemory
from spreadrl.train.producer import (
    AsyncRollouts,
    behaviour_weight_metrics,
    finish_versions,
    staleness,
    stamp_samples,
    versioned,
)
from spreadrl.train.sampler import EpochShuffle


class StepSource(Protocol):
    """Where a GRPO step's rollouts come from: sampled in the loop
    (:class:`spreadrl.train.sources.SyncRollouts`), or by a producer running
    ahead of the trainer (:class:`spreadrl.train.sources.AsyncSteps`).

    The recipe's loop is the same for both; what differs lives behind these calls."""

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        """Step ``step``'s rollouts, and the prompt sampler's state after its draws."""
        ...

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        """What the source records of the samples about to be trained, as metrics."""
        ...

    def updated(self, step: int, model: nn.Module, start: float) -> dict[str, float]:
        """The update of ``step`` (begun at ``start``, perf_counter) is done: its metrics."""
        ...

    def held_out(self, step: int) -> dict[str, float]:
        """The held-out eval's ``eval/*`` metrics when one is due after ``step``, else none."""
        ...

    def stop(self) -> None:
        """Stop sampling ahead (idempotent); rollouts in flight are discarded."""
        ...

    def close(self) -> None:
        """Stop, and release what the source owns (the asynchronous producer's thread); the
        environment pool is the recipe's, which closes it."""
        ...


@dataclass
class SyncRollouts:
    """The rollout source of the synchronous loop (a :class:`~spreadrl.train.sources.StepSource`):
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


class AsyncSteps:
    """The rollout source of asynchronous mode (a :class:`~spreadrl.train.sources.StepSource`):
    the producer, the weight hand-over and the step's bookkeeping."""

    def __init__(
        self,
        producer: AsyncRollouts[StepRollouts],
        publish: Callable[[int, torch.nn.Module], None],
        max_staleness: int,
        tis_cap: float,
        held_out: HeldOut,
        eval_engine: RolloutEngine,
    ) -> None:
        self.producer = producer
        self._publish = publish
        self.max_staleness = max_staleness
        self.tis_cap = tis_cap
        self.staleness: list[int] = []  # every trained sample's, over the run
        self._held_out = held_out
        self._eval_engine = eval_engine  # the producer's engine is the producer's alone

    @classmethod
    def start(
        cls,
        rollout: RolloutConfig,
        model: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        engine: RolloutEngine,
        collect: Callable[[Policy, int], StepRollouts],
        sampler_state: Callable[[], dict[str, object]],
        held_out: HeldOut,
        *,
        steps: int,
        start: int,
        compute_dtype: str,
        tis_cap: float,
    ) -> AsyncSteps:
        """Build and start the producer for steps ``start + 1 .. steps``, at most
        ``rollout.max_staleness`` versions ahead.

        ``engine`` says how the producer samples and how the trainer's weights reach
        it (:meth:`~spreadrl.rollout.engine.RolloutEngine.producer`);
        ``collect(policy, step)``: one step's rollouts (run in the producer's thread);
        ``tis_cap``: the behaviour weights' cap. The held-out eval samples with the
        engine's :meth:`~spreadrl.rollout.engine.RolloutEngine.eval_engine`."""
        k = rollout.max_staleness
        feed = engine.producer(model, tokenizer, lambda m: compute_context(m, compute_dtype))
        policy = versioned(feed.policy, feed.load, version=start)
        policy.discard = feed.discard

        def produce(step: int) -> StepRollouts:
            with feed.context():
                return collect(policy, step)

        def publish(step: int, trained: torch.nn.Module) -> None:
            producer.publish(step, feed.export(trained))

        producer: AsyncRollouts[StepRollouts] = AsyncRollouts(
            produce, sampler_state, policy, first=start + 1, last=steps, max_staleness=k
        )
        if feed.send_first:  # the producer starts from the model's files
            publish(start, model)
        producer.start()
        return cls(producer, publish, k, tis_cap, held_out, engine.eval_engine(model, tokenizer))

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        t0 = time.perf_counter()
        produced = self.producer.take(step)
        rollouts = produced.value
        rollouts.metrics["wait_s"] = time.perf_counter() - t0  # the trainer idle, waiting
        rollouts.metrics["rollout_s"] = produced.seconds
        # the sampler as it was after this step's prompts, not later: a resumed run draws
        # the in-flight steps' prompts again (their rollouts are discarded)
        return rollouts, produced.sampler_state

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        """Versions onto the samples; staleness of the trained samples against version
        step - 1 (checked against the bound); the behaviour weights."""
        for traj in trajs:
            finish_versions(traj)
        stamp_samples(samples, trajs)
        staleness(step - 1, trajs, self.max_staleness)  # raises past the bound
        lags = [step - 1 - s.version for s in samples if s.version is not None]
        self.staleness += lags
        out = {
            "staleness_mean": sum(lags) / len(lags) if lags else 0.0,
            "staleness_max": float(max(lags, default=0)),
        }
        out.update(behaviour_weight_metrics(samples, self.tis_cap))
        return out

    def updated(self, step: int, model: torch.nn.Module, start: float) -> dict[str, float]:
        """The overlap: share of the update during which the producer was rolling out.
        Then the weights after ``step`` updates go to the producer (its next sync)."""
        end = time.perf_counter()
        overlap = self.producer.overlap_s(start, end) / max(end - start, 1e-9)
        self._publish(step, model)
        return {"overlap": overlap}

    def held_out(self, step: int) -> dict[str, float]:
        return self._held_out.run_if_due(step, self._eval_engine)

    def stop(self) -> None:
        self.producer.stop(timeout=600.0)

    def close(self) -> None:
        self.stop()

"""Where a GRPO step's rollouts come from: the contract and its two sources.

:func:`spreadrl.train.grpo.train_steps` asks a :class:`StepSource` for each step's
:class:`StepRollouts` and tells it when the update begins and ends. Both sources
hold the run's two sides and nothing that repeats them: the trained side
(:class:`Trained`, :class:`spreadrl.train.trained_model.TrainedSide`) and the
episode side (:class:`Episodes`, :class:`spreadrl.train.episodes.EpisodeSide`).

- :class:`SyncSource` samples each step in the loop with the current weights, the
  trainer waiting.
- :class:`AsyncSource` (``rollout.max_staleness`` > 0) samples the next steps in a
  producer thread (:mod:`spreadrl.train.producer`) during the update. The rollout
  engine says how the producer samples and how the trainer's weights reach it
  (:meth:`spreadrl.rollout.engine.RolloutEngine.producer`):

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

:func:`open_source` picks one; the recipe's loop is one loop for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
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
from spreadrl.train.config import LossConfig
from spreadrl.train.distributed import DistInfo, release_for_generation
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
from spreadrl.train.rewards import StepRollouts
from spreadrl.train.sampler import EpochShuffle


class Trained(Protocol):
    """What a source reads of the trained side (:class:`~spreadrl.train.trained_model.TrainedSide`)."""

    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    optimizer: Optimizer
    loss: LossConfig
    memory: PeakMemory
    info: DistInfo

    @property
    def compute_dtype(self) -> str: ...


class Episodes(Protocol):
    """What a source reads of the episode side (:class:`~spreadrl.train.episodes.EpisodeSide`)."""

    engine: RolloutEngine
    sampler: EpochShuffle[tuple[str, int]]
    rollout: RolloutConfig
    steps: int

    def collect(self, policy: Policy, step: int) -> StepRollouts: ...

    def generating(self, model: nn.Module, compute_dtype: str) -> AbstractContextManager[None]: ...

    def held_out(
        self, step: int, engine: RolloutEngine, model: nn.Module, compute_dtype: str
    ) -> dict[str, float]: ...


class StepSource(Protocol):
    """Where a GRPO step's rollouts come from: sampled in the loop (:class:`SyncSource`),
    or by a producer running ahead of the trainer (:class:`AsyncSource`).

    The recipe's loop is the same for both; what differs lives behind these calls."""

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        """Step ``step``'s rollouts, and the prompt sampler's state after its draws."""
        ...

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        """What the source records of the samples about to be trained, as metrics."""
        ...

    def updated(self, step: int, start: float) -> dict[str, float]:
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


def open_source(trained: Trained, episodes: Episodes, *, start: int) -> StepSource:
    """The synchronous source, or with ``rollout.max_staleness`` > 0 the asynchronous one,
    its producer started for steps ``start + 1 .. steps`` (docs/async.md)."""
    if not episodes.rollout.max_staleness:  # sampled in the loop with the current weights
        return SyncSource(trained, episodes)
    # the next steps' rollouts are sampled during the update, at most max_staleness ahead
    return AsyncSource.start(trained, episodes, start=start)


class SyncSource:
    """The source of the synchronous loop: each step samples with the current weights, the
    trainer waiting.

    Before a rollout phase the update's memory is handed back (gradients freed,
    shards only, the allocator's cache emptied), then the engine wakes
    (:func:`spreadrl.train.episodes.generating`)."""

    def __init__(self, trained: Trained, episodes: Episodes) -> None:
        self.trained, self.episodes = trained, episodes

    def next(self, step: int) -> tuple[StepRollouts, dict[str, object]]:
        trained, episodes = self.trained, self.episodes
        release_for_generation(trained.model, trained.optimizer, trained.info.device)
        trained.memory.reset()
        with episodes.generating(trained.model, trained.compute_dtype):
            rollouts = episodes.collect(episodes.engine.policy, step)
        return rollouts, episodes.sampler.state()

    def bookkeeping(
        self, step: int, trajs: list[Trajectory], samples: list[Sample]
    ) -> dict[str, float]:
        return {}  # every sample is on-policy: nothing to record

    def updated(self, step: int, start: float) -> dict[str, float]:
        return {}  # the next step samples with the updated weights in any case

    def held_out(self, step: int) -> dict[str, float]:
        trained = self.trained
        return self.episodes.held_out(
            step, self.episodes.engine, trained.model, trained.compute_dtype
        )

    def stop(self) -> None:
        pass  # nothing runs ahead

    def close(self) -> None:
        pass  # owns nothing: the recipe closes the environments it opened


class AsyncSource:
    """The source of asynchronous mode: the producer, the weight hand-over and the step's
    bookkeeping. The held-out eval samples with the engine's
    :meth:`~spreadrl.rollout.engine.RolloutEngine.eval_engine` (the producer's engine is
    the producer's alone)."""

    def __init__(
        self,
        trained: Trained,
        episodes: Episodes,
        producer: AsyncRollouts[StepRollouts],
        publish: Callable[[int, torch.nn.Module], None],
        eval_engine: RolloutEngine,
    ) -> None:
        self.trained, self.episodes = trained, episodes
        self.producer = producer
        self._publish = publish
        self.staleness: list[int] = []  # every trained sample's, over the run
        self._eval_engine = eval_engine

    @classmethod
    def start(cls, trained: Trained, episodes: Episodes, *, start: int) -> AsyncSource:
        """Build and start the producer for steps ``start + 1 .. episodes.steps``, at most
        ``rollout.max_staleness`` versions ahead; each step's rollouts are
        :meth:`Episodes.collect`'s, run in the producer's thread."""
        model, tokenizer, compute_dtype = trained.model, trained.tokenizer, trained.compute_dtype
        engine = episodes.engine
        feed = engine.producer(model, tokenizer, lambda m: compute_context(m, compute_dtype))
        policy = versioned(feed.policy, feed.load, version=start)
        policy.discard = feed.discard

        def produce(step: int) -> StepRollouts:
            with feed.context():
                return episodes.collect(policy, step)

        def publish(step: int, weights: torch.nn.Module) -> None:
            producer.publish(step, feed.export(weights))

        producer: AsyncRollouts[StepRollouts] = AsyncRollouts(
            produce,
            episodes.sampler.state,
            policy,
            first=start + 1,
            last=episodes.steps,
            max_staleness=episodes.rollout.max_staleness,
        )
        if feed.send_first:  # the producer starts from the model's files
            publish(start, model)
        producer.start()
        return cls(trained, episodes, producer, publish, engine.eval_engine(model, tokenizer))

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
        staleness(step - 1, trajs, self.episodes.rollout.max_staleness)  # raises past the bound
        lags = [step - 1 - s.version for s in samples if s.version is not None]
        self.staleness += lags
        out = {
            "staleness_mean": sum(lags) / len(lags) if lags else 0.0,
            "staleness_max": float(max(lags, default=0)),
        }
        out.update(behaviour_weight_metrics(samples, self.trained.loss.tis_cap))
        return out

    def updated(self, step: int, start: float) -> dict[str, float]:
        """The overlap: share of the update during which the producer was rolling out.
        Then the weights after ``step`` updates go to the producer (its next sync)."""
        end = time.perf_counter()
        overlap = self.producer.overlap_s(start, end) / max(end - start, 1e-9)
        self._publish(step, self.trained.model)
        return {"overlap": overlap}

    def held_out(self, step: int) -> dict[str, float]:
        trained = self.trained
        return self.episodes.held_out(step, self._eval_engine, trained.model, trained.compute_dtype)

    def stop(self) -> None:
        self.producer.stop(timeout=600.0)

    def close(self) -> None:
        self.stop()

"""Asynchronous GRPO inside the recipe: the producer, the weight hand-over, what a step
logs. The producer itself is :mod:`spreadrl.train.async_rollouts`.

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

import torch
from transformers import PreTrainedTokenizerBase

from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engine import RolloutEngine
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.types import Trajectory
from spreadrl.train.async_rollouts import (
    AsyncRollouts,
    behaviour_weight_metrics,
    finish_versions,
    staleness,
    stamp_samples,
    versioned,
)
from spreadrl.train.batching import Sample
from spreadrl.train.held_out import HeldOut
from spreadrl.train.logprobs import compute_context
from spreadrl.train.step_source import StepRollouts


class AsyncSteps:
    """The rollout source of asynchronous mode (a :class:`~spreadrl.train.step_source.StepSource`):
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

"""Asynchronous GRPO inside the recipe: which producer a run gets, how weights reach it,
what a step logs. The producer itself is :mod:`spreadrl.train.async_rollouts`.

- hf backend: the producer samples with its own copy of the model (a deep copy
  of the trainer's at start, without gradients), loaded from a snapshot of the
  trainer's weights at each step boundary. Memory: one more copy of the weights,
  plus a snapshot in flight (at most one: a newer one replaces it), so up to
  2 x the weights beside the trainer's model, gradients and optimizer state.
- vLLM backend: the engine's own processes sample; it is not put to sleep between
  steps. The trainer writes its weights as safetensors shards to shared memory
  (the ``files`` sync) at each step boundary; the producer reloads them in place
  between two engine steps, so requests still running continue under the new
  weights. Only the producer's thread touches the engine.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import torch

from spreadrl.errors import ConfigError
from spreadrl.rollout.colocate import FilesSync
from spreadrl.rollout.hf_policy import HFPolicy
from spreadrl.rollout.policy import Policy
from spreadrl.rollout.types import Trajectory
from spreadrl.train.async_rollouts import (
    AsyncRollouts,
    Produced,
    VersionedPolicy,
    behaviour_weight_metrics,
    finish_versions,
    snapshot_weights,
    staleness,
    stamp_samples,
    versioned,
    weight_loader,
)
from spreadrl.train.batching import Sample
from spreadrl.train.config import GRPOConfig, LossConfig
from spreadrl.train.distributed import DistInfo
from spreadrl.train.precision import compute_context

T = TypeVar("T")


def check_async(cfg: GRPOConfig, info: DistInfo, weight_sync: str) -> None:
    """Refuse, in one line at start-up, the asynchronous setups this does not run.

    ``weight_sync``: the resolved ``rollout.weight_sync`` (ipc or files)."""
    k = cfg.rollout.max_staleness
    if info.enabled and info.world_size > 1:
        raise ConfigError(
            f"rollout.max_staleness={k} runs in one process only for now; under torchrun "
            f"(world size {info.world_size}) set rollout.max_staleness=0"
        )
    if cfg.rollout.backend == "vllm" and weight_sync != "files":
        raise ConfigError(
            f"rollout.max_staleness={k} with rollout.backend=vllm needs "
            f"rollout.weight_sync=files (got {weight_sync}): the ipc sync is not wired "
            "for a producer thread yet"
        )


def decoupled(loss: LossConfig) -> LossConfig:
    """The loss section with the behaviour weights on, whatever ``loss.tis`` says.

    In asynchronous mode a sample's tokens come from older weights than the ones
    updated; without min(pi_prox / pi_behav, cap) the ratio against the proximal
    policy alone would treat them as on-policy (docs/async.md)."""
    return replace(loss, tis=True)


class FilesReload:
    """The vLLM producer's weight sync: the trainer writes a folder (:meth:`write`, its
    thread, at a step boundary), the producer reloads it between engine steps
    (:meth:`__call__`, its thread) and removes it."""

    def __init__(self, policy: object) -> None:
        self.policy = policy
        self.files = FilesSync(policy)

    def write(self, model: torch.nn.Module) -> str:
        folder = Path(tempfile.mkdtemp(prefix="spreadrl-async-", dir=self.files.root))
        self.files.write(model, folder)
        return str(folder)

    def __call__(self, payload: object) -> None:
        try:
            self.policy.llm.collective_rpc(  # type: ignore[attr-defined]
                "reload_weights", kwargs={"weights_path": str(payload)}
            )
        finally:
            self.discard(payload)

    @staticmethod
    def discard(payload: object) -> None:
        shutil.rmtree(str(payload), ignore_errors=True)


class AsyncSteps:
    """What train_grpo holds in asynchronous mode: the producer, the weight hand-over and
    the step's bookkeeping."""

    def __init__(
        self,
        producer: AsyncRollouts[T],
        publish: Callable[[int, torch.nn.Module], None],
        max_staleness: int,
        tis_cap: float,
    ) -> None:
        self.producer = producer
        self._publish = publish
        self.max_staleness = max_staleness
        self.tis_cap = tis_cap
        self.staleness: list[int] = []  # every trained sample's, over the run

    def take(self, step: int) -> Produced[T]:
        return self.producer.take(step)

    def publish(self, step: int, model: torch.nn.Module) -> None:
        """The weights after ``step`` updates, to the producer."""
        self._publish(step, model)

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

    def overlap(self, start: float, end: float) -> float:
        """Share of [start, end] (the update) during which the producer was rolling out."""
        return self.producer.overlap_s(start, end) / max(end - start, 1e-9)

    def stop(self) -> None:
        self.producer.stop(timeout=600.0)


def start_async(
    cfg: GRPOConfig,
    model: torch.nn.Module,
    tokenizer: object,
    engine: Policy | None,
    collect: Callable[[Policy, int], T],
    sampler_state: Callable[[], dict[str, object]],
    *,
    start: int,
    compute: str,
) -> AsyncSteps:
    """Build and start the producer for steps ``start + 1 .. cfg.steps``.

    ``engine``: the vLLM policy (None: the hf backend, sampling with a copy of
    ``model``); ``collect(policy, step)``: one step's rollouts (the recipe's own
    collection, run in the producer's thread)."""
    k = cfg.rollout.max_staleness
    if engine is None:
        sampler_model = copy.deepcopy(model)
        for p in sampler_model.parameters():
            p.requires_grad_(False)
        batch = cfg.rollout.group_size * cfg.rollout.prompts_per_step
        inner = HFPolicy(sampler_model, tokenizer, max_batch_size=batch)
        policy: VersionedPolicy = versioned(inner, weight_loader(sampler_model), version=start)

        def produce(step: int) -> T:
            with compute_context(sampler_model, compute):
                return collect(policy, step)

        def publish(step: int, trained: torch.nn.Module) -> None:
            producer.publish(step, snapshot_weights(trained))

    else:
        reload = FilesReload(engine)
        policy = versioned(engine, reload, version=start)
        policy.discard = reload.discard

        def produce(step: int) -> T:
            return collect(policy, step)

        def publish(step: int, trained: torch.nn.Module) -> None:
            producer.publish(step, reload.write(trained))

    producer: AsyncRollouts[T] = AsyncRollouts(
        produce, sampler_state, policy, first=start + 1, last=cfg.steps, max_staleness=k
    )
    if engine is not None:  # the engine loaded the model's files: send the trainer's weights
        publish(start, model)
    producer.start()
    return AsyncSteps(producer, publish, k, cfg.loss.tis_cap)

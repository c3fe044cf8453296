"""The no-grad passes of a GRPO step: how tokens are scored, and the proximal and
reference log-probs attached to the samples before the update.

:class:`LogprobSettings` holds the values a training pass derives from other sections
(sampling distribution, compute dtype, prefix sharing), decided once at build
time; :func:`compute_logprobs` scores samples without keeping activations;
:class:`Scorer` runs a step's passes in the recipe's order, before the source's
bookkeeping and the update (:mod:`spreadrl.train.update`). Each group's shared
prompt runs once per micro-batch (``shared_prefix_min``, see
:mod:`spreadrl.train.batching`); the values equal the full rows' up to float rounding.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from spreadrl.rollout.config import RolloutConfig
from spreadrl.train.batching import (
    MIN_SHARED_PREFIX,
    Sample,
    collate,
    pack_by_tokens,
    prefix_sharing,
)
from spreadrl.train.config import GRPOOptimConfig
from spreadrl.train.distributed import gathered_params
from spreadrl.train.logprobs import sequence_logprobs
from spreadrl.train.memory import PeakMemory
from spreadrl.train.trained_model import Reference


@dataclass(frozen=True)
class LogprobSettings:
    """How a training pass scores tokens: the values derived from other sections, once.

    Log-probs are those of the rollout's sampling distribution (temperature, top-k,
    top-p; greedy rollouts, temperature 0, are scored under the plain softmax), in
    the run's compute dtype, with a group's shared prompt run once per micro-batch
    when ``optim.shared_prefix`` is on. The defaults are the plain distribution in
    float32 without prefix sharing, for callers that score outside a recipe.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    compute_dtype: str = "float32"  # bfloat16: bf16 forward/backward over fp32 master weights
    shared_prefix_min: int = 0  # a group's prompt run once when at least this long; 0 = off

    @classmethod
    def for_run(
        cls, rollout: RolloutConfig, optim: GRPOOptimConfig, compute_dtype: str
    ) -> LogprobSettings:
        """The recipe's log-prob settings: ``compute_dtype`` from :func:`spreadrl.train.precision.compute_dtype`."""
        sampled = rollout.temperature > 0
        return cls(
            temperature=rollout.temperature if sampled else 1.0,
            top_k=rollout.top_k if sampled else 0,
            top_p=rollout.top_p if sampled else 1.0,
            compute_dtype=compute_dtype,
            shared_prefix_min=MIN_SHARED_PREFIX if optim.shared_prefix else 0,
        )


def compute_logprobs(
    model: nn.Module,
    samples: Sequence[Sample],
    optim: GRPOOptimConfig,
    logprob_settings: LogprobSettings,
    *,
    pad_id: int,
) -> list[list[float]]:
    """Per-target log-probs of each sample under ``model``, without keeping activations.

    Only trained positions (mask 1) are computed; the others are 0. Micro-batches
    hold ``optim.micro_batch_tokens`` tokens.
    """
    prefix_min = prefix_sharing(model, logprob_settings.shared_prefix_min)
    out: list[list[float]] = [[] for _ in samples]
    with torch.no_grad():
        for idx in pack_by_tokens(samples, optim.micro_batch_tokens, shared_prefix_min=prefix_min):
            batch = collate([samples[i] for i in idx], pad_id, shared_prefix_min=prefix_min)
            logp, _ = sequence_logprobs(
                model,
                batch,
                logprob_settings.temperature,
                top_k=logprob_settings.top_k,
                top_p=logprob_settings.top_p,
                compute_dtype=logprob_settings.compute_dtype,
            )
            logp = logp.float().cpu()
            offsets = batch["offsets"].tolist() if "offsets" in batch else [0] * len(idx)
            for row, (i, cut) in enumerate(zip(idx, offsets, strict=True)):
                own = logp[row, : len(samples[i].ids) - 1 - cut].tolist()
                out[i] = [0.0] * cut + own  # the cut prefix holds no trained position
    return out


@dataclass
class Scorer:
    """A step's no-grad passes over the samples it trains on, before the update.

    ``per_step``: optimizer steps per GRPO step; with one, the proximal pass is skipped
    (the update's own forward gives the same log-probs). ``memory`` gauges the rollout
    phase's peak, read and reset here, where the trained side takes the device back."""

    model: nn.Module
    reference: Reference | None
    optim: GRPOOptimConfig
    logprob_settings: LogprobSettings
    per_step: int
    pad_id: int
    memory: PeakMemory

    def score(self, samples: list[Sample]) -> dict[str, float]:
        """Attach the proximal and the reference log-probs to ``samples``; their metrics.

        The proximal policy's log-probs first (decoupled PPO in asynchronous mode too):
        with one epoch of one mini-batch they are the weights of the single update,
        whose detached log-probs :func:`~spreadrl.train.update.policy_update` uses, so
        the pass is skipped. Every rank enters both passes, even with no samples
        (dynamic sampling can keep none on one rank): gathering sharded parameters is
        a collective."""
        memory, pad_id = self.memory, self.pad_id
        metrics = memory.figures("rollout")  # allocated, reserved and device peaks
        memory.reset()
        t0 = time.perf_counter()
        with gathered_params(self.model):
            if samples and self.per_step > 1:
                old = compute_logprobs(
                    self.model, samples, self.optim, self.logprob_settings, pad_id=pad_id
                )
                for sample, lp in zip(samples, old, strict=True):
                    sample.old_logprobs = lp
        if self.reference is not None:  # a collective when sharded: every rank scores
            with self.reference.active() as module:
                lps = compute_logprobs(
                    module, samples, self.optim, self.logprob_settings, pad_id=pad_id
                )
            for sample, lp in zip(samples, lps, strict=True):
                sample.ref_logprobs = lp
        metrics["logprobs_s"] = time.perf_counter() - t0
        return metrics

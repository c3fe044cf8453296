"""The policy-gradient update of one GRPO step, over token-budget micro-batches.

Loss aggregation is exact across micro-batches: each micro-batch's loss is
weighted by its share of the mini-batch (trained tokens for token-mean,
sequences for seq-mean-token-mean), so gradient accumulation gives the same
gradient as one big batch would.

Both the update and the no-grad passes run each group's shared prompt once
per micro-batch (``shared_prefix_min``, see :mod:`spreadrl.train.batching`);
the values equal the full rows' up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from spreadrl.rollout.config import RolloutConfig
from spreadrl.train.batching import (
    MIN_SHARED_PREFIX,
    Sample,
    collate,
    pack_by_tokens,
    prefix_sharing,
)
from spreadrl.train.config import GRPOOptimConfig, LossConfig
from spreadrl.train.distributed import all_reduce
from spreadrl.train.logprobs import sequence_logprobs
from spreadrl.train.losses import kl_penalty, masked_mean, policy_loss, tis_weights


@dataclass(frozen=True)
class Scoring:
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
    def for_run(cls, rollout: RolloutConfig, optim: GRPOOptimConfig, compute_dtype: str) -> Scoring:
        """The recipe's scoring: ``compute_dtype`` from :func:`spreadrl.train.precision.compute_dtype`."""
        sampled = rollout.temperature > 0
        return cls(
            temperature=rollout.temperature if sampled else 1.0,
            top_k=rollout.top_k if sampled else 0,
            top_p=rollout.top_p if sampled else 1.0,
            compute_dtype=compute_dtype,
            shared_prefix_min=MIN_SHARED_PREFIX if optim.shared_prefix else 0,
        )


def minibatches(batch: int, optim: GRPOOptimConfig) -> int:
    """Optimizer steps one epoch over ``batch`` sequences takes (``optim.mini_batch_size``)."""
    size = optim.mini_batch_size or batch
    return max(1, -(-batch // size))


def updates_per_step(rollout: RolloutConfig, optim: GRPOOptimConfig) -> int:
    """Optimizer steps of a full GRPO step: epochs x mini-batches (the LR schedule's unit).

    With one, the policy that sampled is the one being updated, so the update takes
    its old log-probs from its own forward; with more, they are computed first."""
    return optim.ppo_epochs * minibatches(rollout.prompts_per_step * rollout.group_size, optim)


def compute_logprobs(
    model: nn.Module,
    samples: Sequence[Sample],
    optim: GRPOOptimConfig,
    scoring: Scoring,
    *,
    pad_id: int,
) -> list[list[float]]:
    """Per-target log-probs of each sample under ``model``, without keeping activations.

    Only trained positions (mask 1) are computed; the others are 0. Micro-batches
    hold ``optim.micro_batch_tokens`` tokens.
    """
    prefix_min = prefix_sharing(model, scoring.shared_prefix_min)
    out: list[list[float]] = [[] for _ in samples]
    with torch.no_grad():
        for idx in pack_by_tokens(samples, optim.micro_batch_tokens, shared_prefix_min=prefix_min):
            batch = collate([samples[i] for i in idx], pad_id, shared_prefix_min=prefix_min)
            logp, _ = sequence_logprobs(
                model,
                batch,
                scoring.temperature,
                top_k=scoring.top_k,
                top_p=scoring.top_p,
                compute_dtype=scoring.compute_dtype,
            )
            logp = logp.float().cpu()
            offsets = batch["offsets"].tolist() if "offsets" in batch else [0] * len(idx)
            for row, (i, cut) in enumerate(zip(idx, offsets, strict=True)):
                own = logp[row, : len(samples[i].ids) - 1 - cut].tolist()
                out[i] = [0.0] * cut + own  # the cut prefix holds no trained position
    return out


def _trained(sample: Sample) -> int:
    return int(sum(sample.mask[1:]))


def policy_update(
    model: nn.Module,
    optimizer: Optimizer,
    samples: Sequence[Sample],
    loss_cfg: LossConfig,
    optim: GRPOOptimConfig,
    scoring: Scoring,
    *,
    pad_id: int,
    scheduler: LRScheduler | None = None,
    seed: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """PPO-style epochs over mini-batches; returns averaged metrics of the step.

    Under data parallelism (``world_size`` > 1, FSDP averaging gradients over
    ranks) each rank passes its own samples; the loss is normalised by the
    global token (or sequence) count, so the step equals the single-process
    step on all samples, and every rank runs the same number of mini- and
    micro-batches (padding with zero-weight ones). Ranks may hold unequal numbers
    of samples (dynamic sampling drops groups per rank): with ``mini_batch_size``
    0 every rank still takes one optimizer step per epoch; with a mini-batch size
    each rank takes ``mini_batch_size // world_size`` of its own samples per
    mini-batch, and a rank that runs out pads with filler mini-batches.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    metrics: dict[str, list[float]] = {}
    generator = torch.Generator().manual_seed(seed)
    if optim.mini_batch_size:
        size = max(1, optim.mini_batch_size // world_size)
    else:  # one mini-batch: as large as the largest rank's share (ranks may hold unequal ones)
        size = max(1, int(all_reduce(len(samples), op="max")))
    token_mean = loss_cfg.aggregation == "token-mean"
    filler = Sample(ids=[pad_id, pad_id], mask=[0, 0])
    model.train()
    prefix_min = prefix_sharing(model, scoring.shared_prefix_min)
    for _ in range(optim.ppo_epochs):
        order = torch.randperm(len(samples), generator=generator).tolist()
        n_mini = int(all_reduce(-(-len(order) // size), op="max"))
        for m in range(n_mini):
            mini = [samples[i] for i in order[m * size : (m + 1) * size]]
            local = sum(_trained(s) for s in mini) if token_mean else len(mini)
            total = all_reduce(local)
            micro = (
                pack_by_tokens(mini, optim.micro_batch_tokens, shared_prefix_min=prefix_min)
                if mini
                else []
            )
            n_micro = int(all_reduce(len(micro), op="max"))
            optimizer.zero_grad(set_to_none=True)
            for j in range(n_micro):
                real = j < len(micro)
                # a rank with fewer micro-batches runs the 2-token filler: a zero, graph-
                # connected loss (see logprobs._selective_head), weighted 0 below
                chunk = [mini[i] for i in micro[j]] if real else [filler]
                batch = collate(chunk, pad_id, shared_prefix_min=prefix_min)
                logp, entropy = sequence_logprobs(
                    model,
                    batch,
                    scoring.temperature,
                    top_k=scoring.top_k,
                    top_p=scoring.top_p,
                    entropy=loss_cfg.entropy_coef > 0,
                    compute_dtype=scoring.compute_dtype,
                )
                device = logp.device
                mask = batch["loss_mask"].to(device)
                old = batch.get("old_logprobs")
                old = logp.detach() if old is None else old.to(device)
                weights = None
                if loss_cfg.tis and "rollout_logprobs" in batch:
                    weights = tis_weights(
                        old, batch["rollout_logprobs"].to(device), cap=loss_cfg.tis_cap
                    )
                loss, info = policy_loss(
                    logp,
                    old,
                    batch["advantages"].to(device),
                    mask,
                    clip_low=loss_cfg.clip_low,
                    clip_high=loss_cfg.clip_high,
                    dual_clip_c=loss_cfg.dual_clip_c,
                    aggregation=loss_cfg.aggregation,
                    tis_weights=weights,
                )
                if loss_cfg.kl_coef > 0 and "ref_logprobs" in batch:
                    kl = kl_penalty(
                        logp,
                        batch["ref_logprobs"].to(device),
                        kind=loss_cfg.kl_estimator,
                        clamp=loss_cfg.kl_clamp,
                    )
                    kl_mean = masked_mean(kl, mask)
                    loss = loss + loss_cfg.kl_coef * kl_mean
                    info = {**info, "kl": float(kl_mean.detach())}
                if entropy is not None:  # only computed (with grad) when the bonus is on
                    ent = masked_mean(entropy, mask)
                    loss = loss - loss_cfg.entropy_coef * ent
                    info = {**info, "entropy": float(ent.detach())}
                share = (
                    (sum(_trained(s) for s in chunk) if token_mean else len(chunk)) if real else 0
                )
                (loss * (share / max(total, 1) * world_size)).backward()
                if real:
                    for key, value in {**info, "loss": float(loss.detach())}.items():
                        metrics.setdefault(key, []).append(float(value))
            grad_norm = torch.nn.utils.clip_grad_norm_(params, optim.grad_clip)
            full = getattr(grad_norm, "full_tensor", None)
            metrics.setdefault("grad_norm", []).append(float(full() if full else grad_norm))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
    return {k: sum(v) / len(v) for k, v in metrics.items() if v}

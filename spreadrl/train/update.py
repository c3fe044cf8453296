"""The policy-gradient update of one GRPO step, over token-budget micro-batches.

Loss aggregation is exact across micro-batches: each micro-batch's loss is
weighted by its share of the mini-batch (trained tokens for token-mean,
sequences for seq-mean-token-mean), so gradient accumulation gives the same
gradient as one big batch would. :func:`micro_batches` is the plan of one optimizer
step, shared with SFT's (:func:`spreadrl.train.sft.sft_loss_step`).

The update runs each group's shared prompt once per micro-batch
(``shared_prefix_min``, see :mod:`spreadrl.train.batching`), as the no-grad passes
of :meth:`spreadrl.train.trained_model.TrainedSide.logprob_passes` do; the values
equal the full rows' up to float rounding.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from spreadrl.train.batching import Sample, collate, pack_by_tokens, prefix_sharing
from spreadrl.train.config import GRPOOptimConfig, LossConfig
from spreadrl.train.distributed import all_reduce
from spreadrl.train.logprobs import LogprobSettings
from spreadrl.train.losses import grpo_token_loss


def _trained(sample: Sample) -> int:
    return int(sum(sample.mask[1:]))


@dataclass(frozen=True)
class MicroBatch:
    """One forward/backward of the update: its samples and its loss's weight.

    ``weight`` is the micro-batch's share of its mini-batch's trained tokens (or
    sequences, seq-mean-token-mean) over all ranks, times the world size (FSDP
    averages gradients over ranks). A padding micro-batch (``real`` False) holds the
    2-token filler, weighted 0: it only keeps the ranks' collectives in step."""

    samples: list[Sample]
    weight: float
    real: bool


def micro_batch_plan(
    samples: Sequence[Sample],
    optim: GRPOOptimConfig,
    *,
    token_mean: bool,
    generator: torch.Generator,
    prefix_min: int,
    pad_id: int,
    world_size: int = 1,
) -> Iterator[list[MicroBatch]]:
    """One epoch over ``samples``: its mini-batches (one optimizer step each) in a
    seeded random order, each as its token-budget micro-batches.

    Every rank yields the same number of mini-batches and, within each, of micro-batches
    (padding with filler ones), so the collectives of the update line up. A lazy
    generator: each mini-batch's counts are reduced over ranks when it is reached."""
    if optim.mini_batch_size:
        size = max(1, optim.mini_batch_size // world_size)
    else:  # one mini-batch: as large as the largest rank's share (ranks may hold unequal ones)
        size = max(1, int(all_reduce(len(samples), op="max")))
    order = torch.randperm(len(samples), generator=generator).tolist()
    n_mini = int(all_reduce(-(-len(order) // size), op="max"))
    for m in range(n_mini):
        mini = [samples[i] for i in order[m * size : (m + 1) * size]]
        _, plan = micro_batches(
            mini,
            optim.micro_batch_tokens,
            token_mean=token_mean,
            prefix_min=prefix_min,
            pad_id=pad_id,
            world_size=world_size,
        )
        yield plan


def micro_batches(
    mini: Sequence[Sample],
    micro_batch_tokens: int,
    *,
    token_mean: bool,
    prefix_min: int,
    pad_id: int,
    world_size: int = 1,
) -> tuple[float, list[MicroBatch]]:
    """One optimizer step's samples (this rank's share) as token-budget micro-batches, and
    the step's count over all ranks (trained tokens, or sequences without ``token_mean``)
    that their weights divide by: the plan GRPO's update and SFT's step share.

    Every rank gets as many micro-batches as the rank with the most, padding with
    filler ones (2 tokens, nothing trained, weight 0), so FSDP's collectives line up."""
    total = all_reduce(sum(_trained(s) for s in mini) if token_mean else len(mini))
    packed = pack_by_tokens(mini, micro_batch_tokens, shared_prefix_min=prefix_min) if mini else []
    filler = Sample(ids=[pad_id, pad_id], mask=[0, 0])
    plan = []
    for j in range(int(all_reduce(len(packed), op="max"))):
        if j >= len(packed):  # this rank has fewer: a zero, graph-connected loss
            plan.append(MicroBatch([filler], 0.0, real=False))
            continue
        chunk = [mini[i] for i in packed[j]]
        share = sum(_trained(s) for s in chunk) if token_mean else len(chunk)
        plan.append(MicroBatch(chunk, share / max(total, 1) * world_size, real=True))
    return total, plan


def micro_batch_loss(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    loss_cfg: LossConfig,
    logprob_settings: LogprobSettings,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one collated micro-batch under ``model`` (with grad), and its metrics.

    The old log-probs are the batch's (the proximal pass), or this forward's own,
    detached, when the step takes one optimizer step (the same weights)."""
    logp, entropy = logprob_settings.sequence_logprobs(
        model, batch, entropy=loss_cfg.entropy_coef > 0
    )
    device = logp.device
    old = batch.get("old_logprobs")
    rollout, ref = batch.get("rollout_logprobs"), batch.get("ref_logprobs")
    return grpo_token_loss(
        logp,
        logp.detach() if old is None else old.to(device),
        batch["advantages"].to(device),
        batch["loss_mask"].to(device),
        loss_cfg,
        rollout_logp=None if rollout is None else rollout.to(device),
        ref_logp=None if ref is None else ref.to(device),
        entropy=entropy,
    )


def policy_update(
    model: nn.Module,
    optimizer: Optimizer,
    samples: Sequence[Sample],
    loss_cfg: LossConfig,
    optim: GRPOOptimConfig,
    logprob_settings: LogprobSettings,
    *,
    pad_id: int,
    scheduler: LRScheduler | None = None,
    seed: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """PPO-style epochs over mini-batches (:func:`micro_batch_plan`); returns the step's
    metrics, each averaged over the micro-batches (``grad_norm`` over optimizer steps).

    Under data parallelism (``world_size`` > 1, FSDP averaging gradients over ranks)
    each rank passes its own samples; the loss is normalised by the global token (or
    sequence) count, so the step equals the single-process step on all samples. Ranks
    may hold unequal numbers of samples (dynamic sampling drops groups per rank): with
    ``mini_batch_size`` 0 every rank still takes one optimizer step per epoch; with a
    mini-batch size each rank takes ``mini_batch_size // world_size`` of its own samples
    per mini-batch, and a rank that runs out pads with filler mini-batches.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    metrics: dict[str, list[float]] = {}
    generator = torch.Generator().manual_seed(seed)
    model.train()
    prefix_min = prefix_sharing(model, logprob_settings.shared_prefix_min)
    token_mean = loss_cfg.aggregation == "token-mean"
    for _ in range(optim.ppo_epochs):
        for plan in micro_batch_plan(
            samples,
            optim,
            token_mean=token_mean,
            generator=generator,
            prefix_min=prefix_min,
            pad_id=pad_id,
            world_size=world_size,
        ):
            optimizer.zero_grad(set_to_none=True)
            for micro in plan:
                batch = collate(micro.samples, pad_id, shared_prefix_min=prefix_min)
                loss, info = micro_batch_loss(model, batch, loss_cfg, logprob_settings)
                (loss * micro.weight).backward()
                for key, value in info.items() if micro.real else ():
                    metrics.setdefault(key, []).append(value)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, optim.grad_clip)
            full = getattr(grad_norm, "full_tensor", None)
            metrics.setdefault("grad_norm", []).append(float(full() if full else grad_norm))
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
    return {k: sum(v) / len(v) for k, v in metrics.items() if v}

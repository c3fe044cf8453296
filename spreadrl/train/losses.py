"""The RL loss as pure tensor functions (shapes [batch, tokens] unless said).

:func:`grpo_token_loss` is GRPO's whole loss, assembled from the pieces above it
(the clipped policy term, TIS weights, the KL estimate, masked means);
:func:`batch_loss` applies it to a collated micro-batch.

Every function takes per-token tensors aligned with the targets and a 0/1
``mask`` of the tokens the policy produced; masked positions (prompt, tool
responses, padding) never reach the loss or the gradient.
"""

from __future__ import annotations

import torch

from spreadrl.train.config import LossConfig


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1; 0 (not NaN) where the mask is empty."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    aggregation: str = "token-mean",
    tis_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate with clip-higher and optional dual clip.

    r = exp(logp - old_logp); per token
    L = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), and for A < 0 with
    dual clip c: L = min(L, -A c). Optional truncated-importance-sampling
    weights multiply L per token. Aggregation: "token-mean" averages over all
    trained tokens of the batch (DAPO); "seq-mean-token-mean" averages each
    sequence's tokens, then the sequences.
    """
    if aggregation not in ("token-mean", "seq-mean-token-mean"):
        raise ValueError(f"unknown aggregation {aggregation!r}")
    mask = mask.to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if dual_clip_c is not None:
        per_token = torch.where(
            advantages < 0, torch.minimum(per_token, -advantages * dual_clip_c), per_token
        )
    if tis_weights is not None:
        per_token = per_token * tis_weights
    if aggregation == "token-mean":
        loss = masked_mean(per_token, mask)
    else:
        has_tokens = (mask.sum(-1) > 0).to(logp.dtype)
        per_seq = masked_mean(per_token, mask, dim=-1)
        loss = (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    with torch.no_grad():
        low = ((ratio < 1.0 - clip_low) & (advantages < 0)).to(logp.dtype)
        high = ((ratio > 1.0 + clip_high) & (advantages > 0)).to(logp.dtype)
        metrics = {
            "clip_frac_low": float(masked_mean(low, mask)),
            "clip_frac_high": float(masked_mean(high, mask)),
            "approx_kl": float(masked_mean(0.5 * (logp - old_logp) ** 2, mask)),
            "ratio_mean": float(masked_mean(ratio, mask)),
        }
        if tis_weights is not None:  # TIS, or asynchronous GRPO's behaviour weights
            metrics["tis_weight_mean"] = float(masked_mean(tis_weights, mask))
    return loss, metrics


def kl_penalty(
    logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3", clamp: float = 10.0
) -> torch.Tensor:
    """Per-token KL estimate against the reference policy.

    k1 = logp - ref_logp; k3 (low variance, Schulman) = exp(d) - d - 1 with
    d = ref_logp - logp, d clamped to [-clamp, clamp] so one token cannot blow up.
    """
    if kind == "k1":
        return logp - ref_logp
    if kind != "k3":
        raise ValueError(f"unknown KL estimator {kind!r} (k1 or k3)")
    d = torch.clamp(ref_logp - logp, min=-clamp, max=clamp)
    return torch.exp(d) - d - 1.0


def tis_weights(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float = 2.0
) -> torch.Tensor:
    """Truncated importance weights min(exp(old - rollout), cap), without gradient.

    Corrects for the rollout engine (e.g. vLLM) sampling from a slightly
    different distribution than the trainer computes.
    """
    with torch.no_grad():
        return torch.clamp(torch.exp(old_logp - rollout_logp), max=cap)


def grpo_token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss: LossConfig,
    *,
    rollout_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's whole loss on one batch of tokens, as ``loss`` (the recipe's section) sets it.

    L = clipped policy term (clip-higher, dual clip ``loss.dual_clip_c``, aggregated per
    ``loss.aggregation``), each token weighted by min(exp(old - rollout), ``tis_cap``)
    when ``loss.tis`` is on and the rollout's log-probs are given (asynchronous GRPO's
    decoupled behaviour weights: the recipe turns ``tis`` on), plus ``kl_coef`` x the
    masked mean KL estimate against ``ref_logp`` (when given and ``kl_coef`` > 0),
    minus ``entropy_coef`` x the masked mean ``entropy`` (when given: computed with grad
    only when the bonus is on). Returns the loss and its metrics, ``loss`` last.
    """
    weights = None
    if loss.tis and rollout_logp is not None:
        weights = tis_weights(old_logp, rollout_logp, cap=loss.tis_cap)
    total, metrics = policy_loss(
        logp,
        old_logp,
        advantages,
        mask,
        clip_low=loss.clip_low,
        clip_high=loss.clip_high,
        dual_clip_c=loss.dual_clip_c,
        aggregation=loss.aggregation,
        tis_weights=weights,
    )
    if loss.kl_coef > 0 and ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, kind=loss.kl_estimator, clamp=loss.kl_clamp)
        kl_mean = masked_mean(kl, mask)
        total = total + loss.kl_coef * kl_mean
        metrics["kl"] = float(kl_mean.detach())
    if entropy is not None:
        ent = masked_mean(entropy, mask)
        total = total - loss.entropy_coef * ent
        metrics["entropy"] = float(ent.detach())
    metrics["loss"] = float(total.detach())
    return total, metrics


def batch_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor | None,
    batch: dict[str, torch.Tensor],
    cfg: LossConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`grpo_token_loss` of one collated micro-batch (:func:`spreadrl.train.batching.collate`)
    given the policy's log-probs (and entropy) of it, with grad; and its metrics.

    The old log-probs are the batch's (the proximal pass), or ``logp`` itself, detached,
    when the step takes one optimizer step (the same weights)."""
    device = logp.device
    old = batch.get("old_logprobs")
    rollout, ref = batch.get("rollout_logprobs"), batch.get("ref_logprobs")
    return grpo_token_loss(
        logp,
        logp.detach() if old is None else old.to(device),
        batch["advantages"].to(device),
        batch["loss_mask"].to(device),
        cfg,
        rollout_logp=None if rollout is None else rollout.to(device),
        ref_logp=None if ref is None else ref.to(device),
        entropy=entropy,
    )

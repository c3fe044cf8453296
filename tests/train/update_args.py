"""Flat keyword settings of a GRPO update, split into the sections the update reads.

The update reads ``loss`` and ``optim`` themselves plus a :class:`LogprobSettings` of derived
values; tests state a handful of settings at once (``clip_high=0.28,
micro_batch_tokens=40``), so these helpers sort each keyword into its section and
refuse one that belongs to none.
"""

from __future__ import annotations

from dataclasses import fields

from torch import nn

from spreadrl.train.batching import MIN_SHARED_PREFIX, Sample, pass_batches
from spreadrl.train.config import GRPOOptimConfig, LossConfig
from spreadrl.train.logprobs import LogprobSettings, compute_logprobs

_SECTIONS = (LossConfig, GRPOOptimConfig, LogprobSettings)


def update_args(**kw: object) -> tuple[LossConfig, GRPOOptimConfig, LogprobSettings]:
    """``(loss, optim, logprob_settings)`` for :func:`policy_update`; prompts shared by default,
    as the recipe does (``optim.shared_prefix`` on)."""
    kw = {"shared_prefix_min": MIN_SHARED_PREFIX, **kw}
    names = [{f.name for f in fields(cls)} for cls in _SECTIONS]
    unknown = set(kw) - set().union(*names)
    assert not unknown, f"no section has {sorted(unknown)}"
    loss, optim, logprob_settings = (
        cls(**{k: v for k, v in kw.items() if k in own})  # type: ignore[arg-type]
        for cls, own in zip(_SECTIONS, names, strict=True)
    )
    return loss, optim, logprob_settings


def score(
    model: nn.Module, samples: list[Sample], pad_id: int = 0, **kw: object
) -> list[list[float]]:
    """:func:`compute_logprobs` of ``samples`` over the no-grad passes' micro-batches, with
    the settings ``kw`` names; no prefix sharing by default."""
    _, optim, settings = update_args(**{"shared_prefix_min": 0, **kw})
    batches = pass_batches(
        samples,
        optim.micro_batch_tokens,
        shared_prefix_min=settings.shared_prefix_min,
        pad_id=pad_id,
    )
    return compute_logprobs(model, samples, batches, settings)

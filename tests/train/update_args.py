"""Flat keyword settings of a GRPO update, split into the sections the update reads.

The update reads ``loss`` and ``optim`` themselves plus a :class:`LogprobSettings` of derived
values; tests state a handful of settings at once (``clip_high=0.28,
micro_batch_tokens=40``), so these helpers sort each keyword into its section and
refuse one that belongs to none.
"""

from __future__ import annotations

from dataclasses import fields

from spreadrl.train.batching import MIN_SHARED_PREFIX
from spreadrl.train.config import GRPOOptimConfig, LossConfig
from spreadrl.train.logprobs import LogprobSettings

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


def logprob_args(**kw: object) -> tuple[GRPOOptimConfig, LogprobSettings]:
    """``(optim, logprob_settings)`` for :func:`compute_logprobs`; no prefix sharing by default."""
    _, optim, logprob_settings = update_args(**{"shared_prefix_min": 0, **kw})
    return optim, logprob_settings

"""build_model turns activation checkpointing on without transformers' deprecation warning."""

from __future__ import annotations

import warnings

import pytest


def _checkpointing(model) -> bool:
    name = "is_activation_checkpointing"
    if not hasattr(type(model), name):  # transformers < 5
        name = "is_gradient_checkpointing"
    return bool(getattr(model, name))


@pytest.mark.parametrize("lora", [False, True])
def test_checkpointing_is_on_and_warns_nothing(tiny_model_dir, lora):
    from spreadrl.train.config import LoraSettings, ModelConfig
    from spreadrl.train.precision import resolve_precision
    from spreadrl.train.trained_model import build_model

    cfg = ModelConfig(
        name_or_path=str(tiny_model_dir),
        gradient_checkpointing=True,
        lora=LoraSettings(enabled=lora, target_modules=["q_proj", "v_proj"]),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the old name warns in transformers 5
        model, _, _ = build_model(cfg, resolve_precision(cfg.dtype, "cpu"), "cpu")
    base = model.get_base_model() if lora else model
    assert _checkpointing(base)

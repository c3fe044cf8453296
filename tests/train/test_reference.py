"""The KL reference as a typed object: a frozen copy, or the policy with its LoRA adapter off."""

from __future__ import annotations

import copy

import pytest
import torch

from spreadrl.config import load_config
from spreadrl.train.batching import Sample
from spreadrl.train.config import GRPOConfig
from spreadrl.train.trained_model import build_reference
from tests.train.update_args import score


def _logprobs(model, samples, cfg):
    return score(model, samples, micro_batch_tokens=cfg.optim.micro_batch_tokens)


def _reference_logprobs(ref, cfg):
    """What the scorer does with the reference: score the module it makes active."""
    with ref.active() as module:
        rollout = cfg.rollout
        return score(
            module,
            _samples(),
            micro_batch_tokens=cfg.optim.micro_batch_tokens,
            temperature=rollout.temperature,
            top_k=rollout.top_k,
            top_p=rollout.top_p,
        )


def _flat(rows):
    return [x for row in rows for x in row]


def _samples():
    return [Sample(ids=[5, 9, 12, 7, 3], mask=[0, 0, 1, 1, 1])]


def test_no_reference_without_kl():
    cfg = load_config(GRPOConfig, None, [])
    assert build_reference(torch.nn.Linear(2, 2), cfg.loss) is None


def test_a_frozen_copy_keeps_the_starting_weights(tiny_model):
    model, _ = tiny_model
    model = copy.deepcopy(model)
    cfg = load_config(GRPOConfig, None, ["loss.kl_coef=0.01"])
    ref = build_reference(model, cfg.loss)
    assert ref is not None and ref.separate and ref.model is not model
    assert not any(p.requires_grad for p in ref.model.parameters())
    before = _flat(_reference_logprobs(ref, cfg))
    assert before == pytest.approx(_flat(_logprobs(model, _samples(), cfg)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
    assert _flat(_reference_logprobs(ref, cfg)) == pytest.approx(before)
    assert _flat(_logprobs(model, _samples(), cfg)) != pytest.approx(before)


def test_with_lora_the_reference_is_the_base_with_the_adapter_off(tiny_model):
    from peft import LoraConfig, get_peft_model

    from spreadrl.models.compat import peft_wrapping

    base, _ = tiny_model
    base = copy.deepcopy(base)
    cfg = load_config(GRPOConfig, None, ["loss.kl_coef=0.01"])
    expected = _flat(_logprobs(base, _samples(), cfg))
    with peft_wrapping():
        model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)  # the adapter now changes the output
    ref = build_reference(model, cfg.loss)
    assert ref is not None and not ref.separate and ref.model is model
    assert _flat(_logprobs(model, _samples(), cfg)) != pytest.approx(expected)
    assert _flat(_reference_logprobs(ref, cfg)) == pytest.approx(expected)

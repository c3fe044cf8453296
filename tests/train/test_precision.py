"""Mixed precision: fp32 master weights keep the small updates that bf16 storage rounds away."""

from __future__ import annotations

import pytest
import torch

from spreadrl.errors import ConfigError
from spreadrl.train.batching import Sample
from spreadrl.train.config import ModelConfig, OptimConfig
from spreadrl.train.logprobs import LogprobSettings, compute_context
from spreadrl.train.optimizer import build_optimizer
from spreadrl.train.precision import compute_dtype, resolve_precision
from spreadrl.train.sft import sft_loss_step
from spreadrl.train.trained_model import build_model

STEPS = 3
LR = 1e-6


def _samples() -> list[Sample]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(2):
        ids = torch.randint(3, 200, (16,), generator=gen).tolist()
        out.append(Sample(ids=ids, mask=[0] * 4 + [1] * 12))
    return out


def _train(model, compute: str) -> float:
    """Fraction of one MLP matrix's entries that changed after a few AdamW steps at lr 1e-6."""
    optimizer = build_optimizer(model, OptimConfig(lr=LR, weight_decay=0.01))
    weight = model.model.layers[0].mlp.gate_proj.weight
    before = weight.detach().clone()
    samples = _samples()
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        sft_loss_step(
            model, samples, pad_id=0, micro_batch_tokens=4096,
            settings=LogprobSettings(compute_dtype=compute),
        )  # fmt: skip
        optimizer.step()
    return (weight.detach() != before).float().mean().item()


def test_master_weights_move_at_lr_1e6_where_bf16_storage_does_not(tiny_model_dir):
    # model.dtype=bfloat16: float32 master weights and AdamW state, bf16 compute
    master, _, _ = build_model(
        ModelConfig(name_or_path=str(tiny_model_dir), dtype="bfloat16"),
        resolve_precision("bfloat16", "cpu"),
        "cpu",
    )
    assert {p.dtype for p in master.parameters()} == {torch.float32}
    seen = []
    hook = master.model.layers[0].mlp.gate_proj.register_forward_hook(
        lambda module, args, out: seen.append(out.dtype)
    )
    moved_master = _train(master, "bfloat16")
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}  # the forward ran in bf16
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in master.parameters())

    # what the presets did before: weights (and so AdamW's state) stored in bf16
    stored, _, _ = build_model(
        ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"),
        resolve_precision("float32", "cpu"),
        "cpu",
    )
    stored.to(torch.bfloat16)
    moved_bf16 = _train(stored, "float32")
    # AdamW's step is about lr = 1e-6 per entry; a bf16 weight w changes only when that is
    # above half its rounding step, 2**(floor(log2|w|) - 8): |w| < ~5e-4, about 2% of
    # N(0, 0.02) entries. A float32 weight of 0.02 has a rounding step of 2**-29 (1.9e-9).
    assert moved_bf16 < 0.1
    assert moved_master > 0.99


def test_dtype_settings_resolve_to_master_and_compute_dtypes():
    assert resolve_precision("bfloat16", "cuda:0") == resolve_precision("auto", "cuda")
    assert resolve_precision("auto", "cuda").load == "float32"
    assert resolve_precision("auto", "cuda").compute_dtype == "bfloat16"
    assert resolve_precision("auto", "cpu").compute_dtype == "float32"
    lora = resolve_precision("bfloat16", "cuda", lora=True)  # the frozen base stays bf16
    assert (lora.load, lora.compute_dtype) == ("bfloat16", "bfloat16")
    with pytest.raises(ConfigError, match="model.dtype=float16"):
        compute_dtype("float16", "cuda")


def test_compute_context_is_autocast_in_one_process_and_nothing_for_float32():
    model = torch.nn.Linear(4, 4)
    x = torch.ones(1, 4)
    with compute_context(model, "bfloat16"):
        assert model(x).dtype == torch.bfloat16
    with compute_context(model, "float32"):
        assert model(x).dtype == torch.float32

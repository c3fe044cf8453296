"""`spreadrl plan`: its figures against memory measured on CPU, its arithmetic, its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.plan import Hardware, ModelShape, model_shape, plan_memory, preset_config
from spreadrl.train.config import GRPOConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# Three small Qwen3 updates on CPU (float32, one micro-batch, AdamW state already
# allocated, gradients freed): the peak RSS added by forward + backward, against the
# plan's update peak minus what was resident before it (master weights, optimizer
# state). glibc is told to serve every allocation of 64 KiB or more from mmap, so
# freed tensors leave the resident set at once and RSS follows the live tensors.
_MEASURE = """
import gc, json, sys, torch
from transformers import AutoModelForCausalLM, Qwen3Config
from spreadrl.config import load_config
from spreadrl.train.batching import Sample
from spreadrl.train.config import GRPOConfig
from spreadrl.train.memory import PeakMemory
from spreadrl.plan import GIB, Hardware, model_shape, plan_memory
from spreadrl.models.compat import enable_activation_checkpointing
from spreadrl.train.sft import sft_loss_step

torch.set_num_threads(1)
out = []
for ckpt, tokens, vocab in json.loads(sys.argv[1]):
    config = Qwen3Config(
        hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
        head_dim=64, intermediate_size=2048, vocab_size=vocab, tie_word_embeddings=True,
        layer_types=["full_attention"] * 4, max_position_embeddings=4096,
    )
    cfg = load_config(GRPOConfig, None, [
        f"optim.micro_batch_tokens={tokens}", "model.dtype=float32",
        f"model.gradient_checkpointing={str(ckpt).lower()}",
    ])
    plan = plan_memory(cfg, model_shape(config), Hardware(device="cpu", memory_gib=64))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    if ckpt:
        enable_activation_checkpointing(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    rows = [torch.randint(0, vocab, (tokens // 2,)).tolist() for _ in range(2)]
    samples = [Sample(ids=r, mask=[0] + [1] * (len(r) - 1)) for r in rows]
    sft_loss_step(model, samples, pad_id=0, micro_batch_tokens=tokens)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    memory = PeakMemory("cpu")
    memory.reset()
    sft_loss_step(model, samples, pad_id=0, micro_batch_tokens=tokens)
    measured = memory.added_gb()
    resident = plan.gib("master weights (fp32)") + plan.gib("optimizer state (AdamW, fp32)")
    out.append([measured, plan.phases["update"] - resident])
    del model, optimizer
    gc.collect()
print(json.dumps(out))
"""

CASES = [  # checkpointing, micro-batch tokens, vocabulary
    (True, 1024, 512),  # saved layer inputs + one recomputed layer
    (False, 1024, 512),  # every layer's activations
    (True, 512, 16384),  # the log-prob chunk dominates
]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_update_peak_matches_memory_measured_on_cpu():
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps(CASES)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    # Tolerance: the plan may overestimate by up to 25% (it rounds the recompute factor up,
    # measured 1.26 and planned 1.5, and takes a log-prob chunk's bytes per logit at 12,
    # measured 8.7-15.5) and underestimate by at most 10% (Python objects, autograd's
    # bookkeeping, page rounding). Measured here (2 cores, torch 2.13): 0.87, 0.95, 0.87.
    for case, (measured, planned) in zip(CASES, results, strict=True):
        assert 0.75 * planned <= measured <= 1.10 * planned, (case, measured, planned)


def _shape(**kw) -> ModelShape:
    base = dict(
        params=4_000_000_000,
        layer_params=100_000_000,
        layers=36,
        hidden=2560,
        intermediate=9728,
        q_dim=4096,
        kv_dim=1024,
        vocab=151_936,
    )
    return ModelShape(**{**base, **kw})


def test_qwen3_4b_shape_counts_and_kv_bytes_on_the_meta_device():
    shape = model_shape(preset_config("4b-shape"))
    assert shape.params == 4_022_468_096  # Qwen3-4B, tied embeddings counted once
    assert shape.kv_bytes_per_token() == 147_456  # 36 layers x 8 KV heads x 128 x 2 x bf16
    assert (shape.layers, shape.hidden, shape.vocab) == (36, 2560, 151_936)


def test_fp32_master_weights_gradients_and_adam_state_shard_over_gpus():
    cfg = load_config(GRPOConfig, None, ["model.dtype=bfloat16", "loss.kl_coef=0"])
    shape = _shape()
    one = plan_memory(cfg, shape, Hardware(gpus=1))
    four = plan_memory(cfg, shape, Hardware(gpus=4))
    gib = 2**30
    assert one.gib("master weights (fp32)") == pytest.approx(4 * shape.params / gib)
    assert one.gib("gradients (fp32)") == pytest.approx(4 * shape.params / gib)
    assert one.gib("optimizer state (AdamW, fp32)") == pytest.approx(8 * shape.params / gib)
    assert four.gib("optimizer state (AdamW, fp32)") == pytest.approx(2 * shape.params / gib)
    # one process: autocast's bf16 cast of every weight; FSDP2: a root and two layers
    assert one.gib("compute copy (update)") == pytest.approx(2 * shape.params / gib)
    units = shape.root_params + 2 * shape.layer_params
    assert four.gib("compute copy (update)") == pytest.approx(2 * units / gib)


def test_vllm_share_kv_tokens_follow_the_memory_arithmetic():
    cfg = load_config(
        GRPOConfig,
        None,
        ["rollout.backend=vllm", "rollout.vllm_gpu_memory_utilization=0.3", "model.dtype=bfloat16"],
    )
    plan = plan_memory(cfg, _shape(), Hardware(gpus=4, memory_gib=79.6))
    share = 0.3 * 79.6 * 2**30
    expected = (share - 2 * 4_000_000_000 - 1.5 * 2**30) // (36 * 1024 * 2 * 2)
    assert plan.kv_tokens == int(expected)


def test_a_recipe_that_cannot_fit_is_refused_naming_the_setting():
    cfg = load_config(
        GRPOConfig,
        CONFIGS / "spreadsheet-rl-4b.yaml",
        ["rollout.vllm_gpu_memory_utilization=0.9"],
    )
    shape = model_shape(preset_config("4b-shape"))
    too_much = plan_memory(cfg, shape, Hardware(gpus=4))
    assert not too_much.fits
    assert any("rollout.vllm_gpu_memory_utilization to at most" in p for p in too_much.problems)
    one_gpu = plan_memory(cfg, shape, Hardware(gpus=1))
    assert any("--gpus" in p for p in one_gpu.problems)


def test_the_4b_presets_fit_their_seeds_hardware():
    shape = model_shape(preset_config("4b-shape"))
    for name in ("spreadsheet-rl-4b.yaml", "grpo-tcr-4b.yaml"):
        cfg = load_config(GRPOConfig, CONFIGS / name, [])
        plan = plan_memory(cfg, shape, Hardware(gpus=4))
        assert plan.fits, (name, plan.problems)
        assert plan.kv_tokens >= 2 * plan.max_model_len  # room for more than one sequence


def test_plan_cli_prints_the_table_and_refuses_in_one_line(monkeypatch, capsys):
    # in this process, through the entry point `spreadrl` runs (main(): its error line and
    # exit code), as tests/cli/test_cli_mistakes.py runs the other commands' mistakes
    from tests.cli.test_cli_mistakes import cli, one_error_line

    recipe = str(CONFIGS / "spreadsheet-rl-4b.yaml")
    argv = ["plan", recipe, "--shape", "4b-shape", "--gpus"]
    code, out, err = cli(monkeypatch, capsys, *argv, "4")
    assert code == 0, err
    assert "peak: update" in out and "vLLM KV tokens" in out
    code, out, err = cli(monkeypatch, capsys, *argv, "1")
    error = one_error_line(err)
    assert code == 1 and "does not fit" in error and "--gpus" in error


def test_the_engines_kv_capacity_is_read_and_reported():
    from types import SimpleNamespace

    from spreadrl.rollout.engines.vllm_engine import engine_capacity_line, engine_kv_tokens

    cache = SimpleNamespace(num_gpu_blocks=17_642, block_size=16)
    llm = SimpleNamespace(
        llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cache))
    )
    assert engine_kv_tokens(llm) == 282_272
    assert engine_kv_tokens(SimpleNamespace()) is None
    line = engine_capacity_line(282_272, 31_744, 0.6)
    assert "282,272 tokens" in line and "8.9 sequences" in line and "=0.6" in line
    assert "not reported" in engine_capacity_line(None, 31_744, 0.6)


def test_the_model_config_comes_from_a_local_folder_or_a_named_error(tiny_model_dir):
    from spreadrl.errors import ConfigError
    from spreadrl.models.init import count_parameters
    from spreadrl.plan import load_model_config, plan_recipe

    cfg = load_config(GRPOConfig, None, [f"model.name_or_path={tiny_model_dir}"])
    plan = plan_recipe(cfg, Hardware(device="cpu"))
    params = count_parameters(load_model_config(str(tiny_model_dir)))
    assert plan.gib("master weights (fp32)") == pytest.approx(4 * params / 2**30)
    missing = load_config(GRPOConfig, None, ["model.name_or_path=nobody/no-such-model-xyz"])
    with pytest.raises(ConfigError, match="--shape 4b-shape"):
        plan_recipe(missing, Hardware())


# `spreadrl bench gpu`'s shape: the first GPU run measured it (docs/benchmarks.md, 2026-11-26)
BENCH_SHAPE = [
    "rollout.backend=hf",
    "rollout.group_size=4",
    "rollout.prompts_per_step=4",
    "rollout.max_turns=1",
    "rollout.max_new_tokens_per_turn=256",
    "rollout.max_response_tokens=256",
    "optim.micro_batch_tokens=16384",
    "optim.mini_batch_size=0",
    "loss.kl_coef=0",
    "data.max_prompt_tokens=0",
]


def test_the_bench_shape_does_not_fit_an_h100_once_the_device_is_counted():
    """Measured on one H200: 75.2-75.4 GiB allocated at the update, 80.0 GiB on the
    device (nvidia-smi), 55.1 GiB allocated at the rollout. The plan said 75.1 "fits"."""
    cfg = load_config(GRPOConfig, CONFIGS / "spreadsheet-rl-4b.yaml", BENCH_SHAPE)
    plan = plan_memory(cfg, model_shape(preset_config("4b-shape")), Hardware(gpus=1))
    assert plan.allocated["update"] == pytest.approx(75.3, abs=0.75)
    assert plan.allocated["generation"] == pytest.approx(55.1, abs=0.6)
    assert plan.phases["update"] == pytest.approx(80.0, rel=0.02)  # the device, not torch
    assert plan.phases["update"] > plan.allocated["update"] + 4.0
    assert not plan.fits
    assert plan.verdict("update").startswith("does not fit")
    assert any("optim.micro_batch_tokens to at most" in p for p in plan.problems)


def test_fits_means_the_margin_is_left_free():
    cfg = load_config(
        GRPOConfig,
        CONFIGS / "spreadsheet-rl-4b.yaml",
        [*BENCH_SHAPE, "optim.micro_batch_tokens=8192"],
    )
    shape = model_shape(preset_config("4b-shape"))
    plan = plan_memory(cfg, shape, Hardware(gpus=1))
    assert plan.fits, plan.problems
    spare = 79.6 - plan.phases["update"]
    assert spare >= plan.margin_gib > 0
    assert plan.verdict("update") == f"fits with {spare:.1f} GiB margin"
    # a GPU just big enough for the device peak, but not for the margin, is refused
    tight = plan_memory(cfg, shape, Hardware(gpus=1, memory_gib=plan.phases["update"] + 0.5))
    assert not tight.fits
    assert "margin needed" in tight.verdict("update")


def test_on_cpu_the_device_figures_are_the_allocated_ones():
    cfg = load_config(GRPOConfig, None, ["model.dtype=float32"])
    plan = plan_memory(
        cfg,
        _shape(
            params=10_000_000,
            layer_params=200_000,
            layers=4,
            hidden=256,
            intermediate=512,
            q_dim=256,
            kv_dim=128,
            vocab=1000,
        ),
        Hardware(device="cpu", memory_gib=64),
    )
    assert plan.phases == pytest.approx(plan.allocated)
    assert plan.margin_gib == 0.0


def test_cpu_offload_moves_the_sharded_state_to_cpu_memory():
    """model.cpu_offload (upstream's param_offload + optimizer_offload) as FSDP2 counts it."""
    overrides = ["model.dtype=bfloat16", "loss.kl_coef=0.001", "rollout.backend=vllm"]
    on_gpu = load_config(GRPOConfig, None, overrides)
    offloaded = load_config(GRPOConfig, None, [*overrides, "model.cpu_offload=true"])
    shape = _shape()
    moved = ["master weights (fp32)", "gradients (fp32)", "optimizer state (AdamW, fp32)"]
    moved.append("frozen weights")
    for gpus in (1, 4):
        kept = plan_memory(on_gpu, shape, Hardware(gpus=gpus))
        off = plan_memory(offloaded, shape, Hardware(gpus=gpus))
        assert all(off.gib(name) == 0.0 for name in moved)
        assert off.host_gib == pytest.approx(sum(kept.gib(name) for name in moved))
        assert kept.host_gib == 0.0
        # generation holds the resident state (the gradients are freed by then): all of it left
        left = kept.allocated["generation"] - off.allocated["generation"]
        assert left == pytest.approx(off.host_gib - kept.gib("gradients (fp32)"))
        assert off.allocated["update"] < kept.allocated["update"]
    # one GPU: offload runs through FSDP2, which gathers a unit at a time, not the whole model
    units = shape.root_params + 2 * shape.layer_params
    one = plan_memory(offloaded, shape, Hardware(gpus=1))
    assert one.gib("compute copy (update)") == pytest.approx(2 * units / 2**30)


def test_the_repo_recipe_offloads_and_fits_upstreams_vllm_share():
    cfg = load_config(GRPOConfig, CONFIGS / "spreadsheet-rl-4b-repo.yaml", [])
    assert cfg.model.cpu_offload and cfg.rollout.vllm_gpu_memory_utilization == 0.85
    plan = plan_memory(cfg, model_shape(preset_config("4b-shape")), Hardware(gpus=4))
    assert plan.fits, plan.problems
    kept = load_config(
        GRPOConfig, CONFIGS / "spreadsheet-rl-4b-repo.yaml", ["model.cpu_offload=false"]
    )
    assert not plan_memory(kept, model_shape(preset_config("4b-shape")), Hardware(gpus=4)).fits


def test_cpu_offload_needs_the_fsdp2_path():
    from torch import nn

    from spreadrl.errors import ConfigError
    from spreadrl.train.distributed import DistInfo, shard_model

    with pytest.raises(ConfigError, match="torchrun"):
        shard_model(nn.Linear(2, 2), DistInfo(), cpu_offload=True)
    model = nn.Linear(2, 2)
    assert shard_model(model, DistInfo()) is model  # without offload one process is fine


def test_selective_checkpointing_costs_activation_memory_and_the_plan_says_how_far_it_fits():
    from dataclasses import replace

    from spreadrl.plan import largest_checkpoint_every

    cfg = load_config(
        GRPOConfig,
        CONFIGS / "spreadsheet-rl-4b.yaml",
        [*BENCH_SHAPE, "optim.micro_batch_tokens=4096"],
    )
    shape = model_shape(preset_config("4b-shape"))
    hw = Hardware(gpus=1)
    every = plan_memory(cfg, shape, hw)
    half = plan_memory(replace(cfg, model=replace(cfg.model, checkpoint_every=2)), shape, hw)
    assert half.gib("activations (update)") > every.gib("activations (update)")
    best = largest_checkpoint_every(cfg, shape, hw)
    assert best is not None and best >= 1
    over = replace(cfg, model=replace(cfg.model, checkpoint_every=best + 1))
    assert best == shape.layers or not plan_memory(over, shape, hw).fits
    assert plan_memory(
        replace(cfg, model=replace(cfg.model, checkpoint_every=best)), shape, hw
    ).fits

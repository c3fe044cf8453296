"""`spreadrl bench gpu`: the shapes are valid recipes the plan judges; --smoke runs the build and
both legs on CPU and leaves each part's files as it ends."""

import json

import pytest

from spreadrl.bench.gpu import FULL, QUICK, RECIPE, SMOKE, grpo_overrides, summarize_rows, write_leg


@pytest.mark.parametrize("shape", [FULL, QUICK, SMOKE], ids=["full", "quick", "smoke"])
def test_bench_shapes_are_valid_spreadsheet_rl_recipes(shape, tmp_path):
    from spreadrl.config import load_config
    from spreadrl.train.config import GRPOConfig

    cfg = load_config(GRPOConfig, RECIPE, grpo_overrides(shape, "m", tmp_path))
    assert cfg.rollout.backend == "hf"
    assert cfg.rollout.group_size * cfg.rollout.prompts_per_step == shape.prompts * shape.rollouts
    assert cfg.rollout.max_response_tokens == shape.response_tokens
    assert cfg.optim.micro_batch_tokens == shape.micro_batch_tokens
    assert cfg.loss.kl_coef == 0.0  # no reference copy
    assert cfg.rollout.temperature == 0.6 and cfg.optim.lr == 1e-6  # the rest stays the recipe's


def test_the_plan_judges_the_full_shape_too_big_for_an_h100_and_the_quick_one_fitting(tmp_path):
    """FULL needed 80.0 GiB on the device on 2026-11-26; QUICK must fit a short H100 lease."""
    from spreadrl.config import load_config
    from spreadrl.plan import Hardware, model_shape, plan_memory, preset_config
    from spreadrl.train.config import GRPOConfig

    shape = model_shape(preset_config(FULL.preset))
    full = load_config(GRPOConfig, RECIPE, grpo_overrides(FULL, "m", tmp_path))
    assert not plan_memory(full, shape, Hardware(gpus=1)).fits
    assert plan_memory(full, shape, Hardware(gpus=1, memory_gib=139.8)).fits  # the H200 it ran on
    quick = load_config(GRPOConfig, RECIPE, grpo_overrides(QUICK, "m", tmp_path))
    assert plan_memory(quick, shape, Hardware(gpus=1)).fits
    assert QUICK.steps == 2 and QUICK.response_tokens <= 256  # one warm-up, one measured


def test_a_legs_summary_reads_peaks_utilisation_and_the_split_from_its_rows(tmp_path):
    from transformers import Qwen3Config

    config = Qwen3Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        intermediate_size=128,
        vocab_size=100,
    )
    step = {"generated_tokens": 10.0, "trained_tokens": 400, "trained_sequences": 2,
            "generate_s": 2.0, "tools_s": 0.5, "logprobs_s": 0.0, "update_s": 1.0, "step_s": 4.0,
            "rollout_peak_gb": 3.0, "train_peak_gb": 5.0, "train_reserved_gb": 6.0,
            "train_device_gb": 7.0, "rollout_gpu_util": 40.0}  # fmt: skip
    warm = {**step, "generate_s": 20.0, "train_reserved_gb": 6.5, "rollout_gpu_util": 5.0}
    summary = summarize_rows([warm, step], SMOKE, config)
    assert summary["steps"] == 1  # the warm-up is left out of the rates
    assert summary["generate_tok_s"] == pytest.approx(10 * SMOKE.prompts * SMOKE.rollouts / 2.0)
    assert summary["update_tok_s"] == pytest.approx(400.0)
    assert summary["rollout_gpu_util"] == pytest.approx(40.0)
    assert summary["train_reserved_gib"] == 6.5  # peaks: the most of any step
    assert summary["train_device_gib"] == 7.0 and summary["rollout_reserved_gib"] is None
    assert summary["split"]["generate_s"] == pytest.approx(0.5)
    write_leg(tmp_path, "hf, one process", {**summary, "rows": [warm, step]})
    assert json.loads((tmp_path / "hf-one-process.json").read_text())["steps"] == 1
    lines = (tmp_path / "hf-one-process.steps.jsonl").read_text().splitlines()
    assert [json.loads(line)["generate_s"] for line in lines] == [20.0, 2.0]


@pytest.mark.slow
def test_smoke_runs_the_build_and_both_legs_writing_each_part(tmp_path):
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    out = tmp_path / "bench"
    result = CliRunner().invoke(app, ["bench", "gpu", "--smoke", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "build.json").read_text())["build_s"] > 0
    report = json.loads((out / "bench.json").read_text())
    legs = report["legs"]
    assert list(legs) == ["hf, one process", "hf, torchrun x1 + FSDP2"]
    for label, leg in legs.items():
        assert "error" not in leg, leg
        assert leg["steps"] == 1  # the warm-up step is left out
        assert leg["generate_tok_s"] > 0 and leg["update_tok_s"] > 0
        assert 0 < sum(leg["split"].values()) <= 1.0 + 1e-6
        assert leg["train_peak_gib"] > 0  # RSS on CPU
        assert leg["plan_update_allocated_gib"] > 0
        name = "hf-one-process" if "one" in label else "hf-torchrun-x1-FSDP2"
        assert (out / f"{name}.json").exists()
        rows = (out / f"{name}.steps.jsonl").read_text().splitlines()
        assert len(rows) == 2  # every step's row, the warm-up's too
    # a leg measures steps: no end-state checkpoint, no final model (the 4b-shape's filled a
    # disk); its metrics are all its run folder keeps
    for run in sorted((out / "work").glob("run*")):
        assert (run / "metrics.jsonl").is_file()
        assert not (run / "final").exists() and not (run / ".tmp-final").exists(), run
        assert not any((run / "checkpoints").glob("*")), list((run / "checkpoints").glob("*"))
    assert len(list((out / "work").glob("run*"))) == 2

"""`spreadrl demo --smoke`: every stage of the real pipeline at a tiny size, end to end.

The same code as `make run` (tasks -> oracle SFT data -> tokenizer and tiny
Qwen3 -> SFT -> eval -> GRPO -> eval -> result block), with a few tasks and
steps; what is checked is that each stage ran and left its output, not what
the pass rates are (at this size they mean nothing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from spreadrl.cli.main import main
from spreadrl.demo import DemoSettings

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "tiny-cpu.yaml"
STAGES = ("tasks", "sft_data", "model_init", "sft", "eval_sft", "grpo", "eval_grpo")


@pytest.mark.slow
def test_demo_smoke_runs_every_stage_and_prints_the_result(tmp_path, monkeypatch, capsys):
    long = "a-folder-name-long-enough-that-an-eighty-column-wrap-would-cut-it"
    out = tmp_path / long / long / "demo"  # over 120 characters for any basetemp
    argv = ["spreadrl", "--verbose", "demo", "--smoke", "--out", str(out), "--config", str(RECIPE)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    printed = capsys.readouterr().out
    assert exit_info.value.code in (0, None), printed[-3000:]

    smoke = DemoSettings.smoke()
    # every stage announced itself, in order
    headings = [
        "1. tasks",
        "2. SFT data",
        "3. tokenizer and tiny model",
        "4. SFT cold start",
        "5. eval after SFT",
        "6. GRPO-TCR",
        "7. eval after GRPO",
    ]
    positions = [printed.find(h) for h in headings]
    assert -1 not in positions and positions == sorted(positions), positions
    # ... and left its output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["timings_s"]) == set(STAGES)
    assert summary["sft_steps"] == smoke.sft_max_steps
    assert len((out / "sft.jsonl").read_text().splitlines()) == smoke.train_tasks  # oracle passes
    for name in ("sft", "grpo"):
        assert (out / name / "final" / "model.safetensors").is_file()
        report = json.loads((out / f"eval-{name}" / "report.json").read_text())
        assert report["episodes"] == smoke.test_tasks * smoke.eval_samples
        assert report["episode_errors"] == 0
    grpo_steps = (out / "grpo" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in grpo_steps] == [1]
    # the result block closes the run
    tail = printed[printed.find("7. eval after GRPO") :]
    assert "spreadrl demo" in tail and "held-out pass@1" in tail
    # off a terminal every path is printed whole on one line (tests/cli/test_paths_one_line.py)
    assert len(str(out)) > 120
    assert any(f"spreadrl view {out}" in line for line in tail.splitlines()), tail
    assert any(f"{out}/summary.md" in line for line in tail.splitlines()), tail


def test_the_smoke_sizes_leave_make_run_unchanged():
    """--smoke is its own preset: the demo's defaults (what `make run` runs) are not touched."""
    default, smoke = DemoSettings(), DemoSettings.smoke()
    assert (default.train_tasks, default.test_tasks, default.grpo_overrides) == (None, None, ())
    assert (default.sft_max_steps, default.grpo_steps, default.eval_samples) == (200, 60, 4)
    assert smoke.grpo_steps < default.grpo_steps and smoke.train_tasks is not None

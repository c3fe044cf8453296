"""eval, grpo, sft and demo as a user runs them into a folder that already holds something.

Each command refuses a folder holding another run (one `error:` line naming
each difference, nothing changed), resumes its own run, and on resume cuts its
logs back to the checkpoint's step, so no step is logged twice (issue 32).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from spreadrl.run_folder import RUN_FILE
from tests.cli.test_cli_mistakes import cli, one_error_line


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


# ---- eval ----


def test_eval_resumes_its_own_run_and_refuses_another(tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    base = ["eval", "--config", "tiny-cpu", "--out", str(out)]
    oracle = [*base, "--backend", "oracle", "--tasks", "builtin:demo-test"]
    code, _, err = cli(monkeypatch, capsys, *oracle)
    assert code == 0, err
    report = (out / "report.json").read_text()
    episodes = json.loads(report)["episodes"]
    assert json.loads((out / RUN_FILE).read_text())["settings"]["backend"] == "oracle"

    # another model or backend, or another task set, is refused: the report is not pooled
    code, _, err = cli(
        monkeypatch, capsys, *base, "--backend", "noop", "--tasks", "builtin:demo-test"
    )
    assert code == 1
    line = one_error_line(err)
    assert "backend 'oracle' -> 'noop'" in line and "--out NEW_FOLDER" in line
    code, _, err = cli(
        monkeypatch, capsys, *base, "--backend", "oracle", "--tasks", "builtin:demo-train"
    )
    assert code == 1
    assert "tasks 'builtin:demo-test' -> 'builtin:demo-train'" in one_error_line(err)
    assert (out / "report.json").read_text() == report  # a refusal changes nothing

    # the same eval resumes: finished episodes are kept, none is run or counted twice
    code, printed, err = cli(monkeypatch, capsys, *oracle)
    assert code == 0, err
    assert "resuming the eval" in printed
    assert json.loads((out / "report.json").read_text())["episodes"] == episodes
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == episodes


def test_eval_refuses_a_users_folder_and_keeps_its_files(tmp_path, monkeypatch, capsys):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", str(out)]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 1
    assert "not empty" in one_error_line(err) and "notes.txt" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_an_eval_in_which_no_episode_started_is_an_error(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "eval"
    args = [
        "eval",
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "builtin:demo-test",
        "--out",
        str(out),
    ]
    code, printed, err = cli(monkeypatch, capsys, *args, "data.max_prompt_tokens=32")
    assert code == 1
    line = one_error_line(err)
    assert "no episode started" in line
    assert "32 (data.max_prompt_tokens)" in line and "tokens)" in line
    assert "pass@1" not in printed  # no 0% is shown for what was never measured


# ---- grpo (the code environment: episodes cost generation only) ----


def _grpo_args(model_dir: Path, out: Path, steps: int) -> list[str]:
    return [
        "grpo",
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        f"steps={steps}",
        "device=cpu",
        "data.train_tasks=builtin-code:train",
        "env.kind=code",
        "env.tools=[code_interpreter]",
        "rollout.group_size=2",
        "rollout.prompts_per_step=1",
        "rollout.max_turns=1",
        "rollout.max_new_tokens_per_turn=8",
        "rollout.max_response_tokens=8",
        "sampling.mode=keep",
        "checkpoint.every_steps=1",
        "logging.trajectories_per_step=1",
    ]


@pytest.mark.slow
def test_grpo_resumes_cut_back_refuses_other_recipes_and_resume_changes_steps(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "grpo"
    code, _, err = cli(monkeypatch, capsys, *_grpo_args(tiny_model_dir, out, 2))
    assert code == 0, err
    assert _steps(out / "metrics.jsonl") == [1, 2]
    assert _steps(out / "trajectories.jsonl") == [1, 2]

    # another recipe is refused, naming the difference; nothing is written
    changed = [*_grpo_args(tiny_model_dir, out, 2), "optim.lr=0.5"]
    code, _, err = cli(monkeypatch, capsys, *changed)
    assert code == 1
    assert "optim.lr" in one_error_line(err) and "-> 0.5" in err
    # more steps: only with --resume; --resume never lets through a setting that changes
    # what a step computes
    code, _, err = cli(monkeypatch, capsys, *_grpo_args(tiny_model_dir, out, 3))
    assert code == 1 and "--resume" in one_error_line(err)
    bigger = [*_grpo_args(tiny_model_dir, out, 3), "rollout.group_size=4", "--resume"]
    code, _, err = cli(monkeypatch, capsys, *bigger)
    assert code == 1 and "rollout.group_size 2 -> 4" in one_error_line(err)
    assert _steps(out / "metrics.jsonl") == [1, 2]

    # a stop after step 2 was logged, before it was saved: the run resumes from step 1,
    # and step 2 is logged once, not twice
    shutil.rmtree(out / "checkpoints" / "step-000002")  # the save that never happened
    (out / "checkpoints" / "latest").write_text("step-000001")
    code, printed, err = cli(monkeypatch, capsys, *_grpo_args(tiny_model_dir, out, 3), "--resume")
    assert code == 0, err
    assert "at step 1" in printed
    assert _steps(out / "metrics.jsonl") == [1, 2, 3]
    assert _steps(out / "trajectories.jsonl") == [1, 2, 3]
    history = json.loads((out / RUN_FILE).read_text())["history"]
    assert history[-1]["changes"] == {"steps": [2, 3]}


# ---- sft ----


@pytest.mark.slow
def test_sft_without_a_checkpoint_starts_its_log_over_and_refuses_another_recipe(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    from tests.train.test_sft_e2e import _rows, _write

    data = _write(tmp_path / "sft.jsonl", _rows(2))
    out = tmp_path / "sft"
    args = [
        "sft",
        f"model.name_or_path={tiny_model_dir}",
        f"data.path={data}",
        f"output_dir={out}",
        "steps=1",
        "batch_size=2",
        "device=cpu",
    ]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert _steps(out / "metrics.jsonl") == [1]
    # the same run with no checkpoint to resume from starts over: its old log is replaced,
    # not appended to
    shutil.rmtree(out / "checkpoints")  # (at checkpoint.every_steps=0, the run's end state)
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert _steps(out / "metrics.jsonl") == [1]

    code, _, err = cli(monkeypatch, capsys, *args, "optim.lr=0.5")
    assert code == 1 and "optim.lr" in one_error_line(err)


# ---- demo ----


def test_demo_refuses_a_users_folder_and_deletes_nothing(tmp_path, monkeypatch, capsys):
    out = tmp_path / "precious"
    (out / "my-experiment").mkdir(parents=True)
    (out / "my-experiment" / "notes.txt").write_text("mine")
    code, _, err = cli(monkeypatch, capsys, "demo", "--smoke", "--out", str(out))
    assert code == 1
    assert "not empty" in one_error_line(err)
    assert (out / "my-experiment" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["my-experiment"]


def test_a_demo_rerun_replaces_only_what_the_earlier_demo_wrote(tmp_path):
    from spreadrl.demo import DEMO_ENTRIES, DemoSettings, claim_demo_folder

    out = tmp_path / "demo"
    settings = DemoSettings.smoke(out=out)
    claim_demo_folder(settings)
    for name in ("grpo", "sft"):
        (out / name).mkdir()
        (out / name / "metrics.jsonl").write_text('{"step": 1}\n')
    (out / "summary.json").write_text("{}")
    (out / "notes.txt").write_text("the user's, added later")
    claim_demo_folder(settings)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", RUN_FILE]
    assert "notes.txt" not in DEMO_ENTRIES


def test_a_demo_with_a_recipe_that_does_not_exist_is_an_error(tmp_path, monkeypatch, capsys):
    out = tmp_path / "demo"
    code, _, err = cli(
        monkeypatch, capsys, "demo", "--smoke", "--out", str(out), "--config", "tiny-cpuu"
    )
    assert code == 1
    assert "did you mean 'tiny-cpu'" in one_error_line(err)
    assert not out.exists()

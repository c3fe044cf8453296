"""What a new user met on a first session, each run as they typed it.

Each test runs the command line a newcomer ran (2026-11-27) through the real
entry point and checks the one line it now answers with and its exit code: a run
folder that ``--overwrite`` used to delete, an empty task set scored 0.0%,
numbers and YAML that were silently taken, an ``--out`` that tracebacked, a
recipe given to the wrong command, a typo blamed on the wrong file, a help
example that failed, a stopped command and ``data info`` that disagreed, a
resumed eval that forgot its first session's time, and refusals that loaded
torch first.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_mistakes import cli, one_error_line
from tests.full_disk import FillsUp, safetensors_fills_the_disk
from tests.spawn import ctrl_c_when

# ---- --overwrite replaces only what the same command wrote; a run never ----


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def grpo_run(tmp_path, monkeypatch) -> Path:
    """``runs/grpo`` as a GRPO run leaves it (run.json, metrics, a final model); cwd is tmp."""
    from spreadrl.data.synth import synthesize
    from spreadrl.run_folder import RunIdentity, claim_run_folder

    monkeypatch.chdir(tmp_path)
    run = Path("runs/grpo")
    identity = RunIdentity(
        "grpo", {"steps": 4}, files=("metrics.jsonl",), summary={"model": "runs/tiny"}
    )
    claim_run_folder(run, identity)
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (run / "final").mkdir()
    (run / "final" / "config.json").write_text("{}")
    synthesize(Path("data/syn"), n=2, seed=0)
    return run


RUN_COMMANDS = [
    ["data", "synth", "--out", "runs/grpo", "--n", "2", "--overwrite"],
    ["data", "synth", "--out", "runs/grpo", "--n", "2"],
    ["data", "split", "data/syn", "--out", "runs/grpo", "--overwrite"],
    ["data", "split", "data/syn", "--out", "runs/grpo"],
    ["data", "filter", "data/syn", "--out", "runs/grpo", "--overwrite"],
    ["data", "builtin", "--split", "demo-test", "--out", "runs/grpo", "--overwrite"],
    ["data", "download", "taco", "--out", "runs/grpo", "--overwrite"],
    ["model", "init", "--preset", "tiny", "--out", "runs/grpo", "--overwrite"],
    ["merge", "--checkpoint", "data/syn", "--out", "runs/grpo", "--overwrite"],
    ["merge", "--checkpoint", "data/syn", "--out", "runs/grpo/final", "--overwrite"],
    ["data", "sft-build", "--tasks", "data/syn", "--out", "runs/grpo/metrics.jsonl", "--overwrite"],
]


@pytest.mark.parametrize("argv", RUN_COMMANDS, ids=[" ".join(a[:2] + a[-1:]) for a in RUN_COMMANDS])
def test_no_command_replaces_a_run_with_or_without_overwrite(monkeypatch, capsys, grpo_run, argv):
    before = _snapshot(grpo_run)
    code, _, err = cli(monkeypatch, capsys, *argv)
    line = one_error_line(err)
    assert code == 1
    assert "a grpo run" in line and "run.json" in line and "never replaced" in line, line
    assert "pass --overwrite" not in line  # no flag can replace a run: none is recommended
    assert _snapshot(grpo_run) == before


def test_overwrite_refuses_what_the_command_did_not_write(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mine = Path("mine")
    mine.mkdir()
    (mine / "notes.md").write_text("my notes")
    for argv in (
        ["data", "synth", "--out", "mine", "--n", "2", "--overwrite"],
        ["model", "init", "--preset", "tiny", "--out", "mine", "--overwrite"],
    ):
        code, _, err = cli(monkeypatch, capsys, *argv)
        line = one_error_line(err)
        assert code == 1 and "notes.md" in line and "did not write" in line, line
    assert (mine / "notes.md").read_text() == "my notes" and len(list(mine.iterdir())) == 1


def test_overwrite_still_replaces_the_commands_own_output(tmp_path, monkeypatch, capsys):
    from spreadrl.data.task import load_tasks

    monkeypatch.chdir(tmp_path)
    assert cli(monkeypatch, capsys, "data", "synth", "--out", "syn", "--n", "2")[0] == 0
    code, _, err = cli(monkeypatch, capsys, "data", "synth", "--out", "syn", "--n", "3")
    assert code == 1 and "pass --overwrite" in one_error_line(err)
    code, _, _ = cli(
        monkeypatch, capsys, "data", "synth", "--out", "syn", "--n", "3", "--overwrite"
    )
    assert code == 0 and len(load_tasks("syn")) == 3


# ---- an empty task set is an error; data split says when it writes one ----


def test_an_empty_split_is_warned_and_evaluating_it_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli(monkeypatch, capsys, "data", "synth", "--out", "syn", "--n", "2")[0] == 0
    code, out, _ = cli(monkeypatch, capsys, "data", "split", "syn", "--out", "sp")
    assert code == 0
    assert "warning: val, test got no tasks (2 tasks in all)" in " ".join(out.split())
    code, out, err = cli(
        monkeypatch, capsys, "eval", "--backend", "oracle", "--tasks", "sp/val", "--out", "ev"
    )
    line = one_error_line(err)
    assert code == 1 and "--tasks sp/val: no tasks to evaluate" in line, line
    assert "pass@1" not in out and not Path("ev").exists()


# ---- numbers and YAML that were silently taken ----


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["grpo", "--config", "tiny-cpu", "steps=-1"], "steps must be at least 1, got -1"),
        (["sft", "--config", "sft-tiny-cpu", "steps=-1"], "steps must be 0 (derive from epochs)"),
        (
            ["grpo", "--config", "tiny-cpu", "rollout.temperature=-1"],
            "rollout.temperature must be 0 (greedy) or positive, got -1.0",
        ),
        (
            ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", "runs/e"]
            + ["--temperature", "-1"],
            "rollout.temperature must be 0 (greedy) or positive, got -1.0",
        ),
    ],
    ids=["grpo-steps", "sft-steps", "grpo-temperature", "eval-temperature"],
)
def test_negative_steps_and_temperature_are_refused(tmp_path, monkeypatch, capsys, argv, expected):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(monkeypatch, capsys, *argv)
    line = one_error_line(err)
    blamed = "error: --temperature -1" if "--temperature" in argv else "error: command line "
    assert code == 1 and expected in line and line.startswith(blamed), line
    assert "done" not in out and not Path("runs").exists()


def test_a_recipe_that_repeats_a_key_is_refused(tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("steps: 4\nrollout:\n  group_size: 2\nsteps: 8\n")
    code, _, err = cli(monkeypatch, capsys, "grpo", "--config", str(recipe))
    line = one_error_line(err)
    assert code == 1 and f"{recipe}: key 'steps' appears twice (lines 1 and 4)" in line, line


# ---- an --out that cannot be created: one line in every command with one ----

NOT_CREATABLE = [
    ["data", "synth", "--out", "notes.txt/sub", "--n", "2"],
    ["data", "synth", "--out", "/proc/spreadrl-nope/sub", "--n", "2"],
    ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", "notes.txt/ev"],
    ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", "/proc/spreadrl-e"],
    ["model", "init", "--preset", "tiny", "--out", "notes.txt/m"],
    ["model", "init", "--preset", "tiny", "--out", "/proc/spreadrl-m"],
    ["data", "sft-build", "--tasks", "builtin:demo-train", "--out", "notes.txt/sub/sft.jsonl"],
    ["data", "sft-build", "--tasks", "builtin:demo-train", "--out", "/proc/spreadrl-s/a.jsonl"],
    ["grpo", "--config", "tiny-cpu", "output_dir=notes.txt/g"],
    ["grpo", "--config", "tiny-cpu", "output_dir=/proc/spreadrl-g"],
    ["sft", "--config", "sft-tiny-cpu", "output_dir=notes.txt/s"],
    ["sft", "--config", "sft-tiny-cpu", "output_dir=/proc/spreadrl-s"],
    ["data", "builtin", "--split", "demo-test", "--out", "notes.txt/b"],
    ["demo", "--smoke", "--out", "notes.txt/d"],
    ["merge", "--checkpoint", "runs", "--out", "/proc/spreadrl-merge"],
]


@pytest.mark.parametrize("argv", NOT_CREATABLE, ids=[" ".join(a) for a in NOT_CREATABLE])
def test_an_out_that_cannot_be_created_is_one_line(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    Path("notes.txt").write_text("a file, not a folder")
    Path("runs").mkdir()
    code, _, err = cli(monkeypatch, capsys, *argv)
    line = one_error_line(err)
    assert code == 1, line
    if "notes.txt" in " ".join(argv):
        assert "notes.txt is a file, not a folder" in line, line
    else:
        assert "cannot be created" in line and "/proc/spreadrl-" in line, line


# ---- a recipe knows its kind; a command-line typo is the command line's ----


def test_config_show_finds_an_sft_recipes_kind(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "config", "show", "sft-tiny-cpu")
    assert code == 0, err
    assert "data:\n  path: runs/sft.jsonl" in out and "rollout:" not in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["grpo", "--config", "sft-tiny-cpu"],
            "sft-tiny-cpu is a `spreadrl sft` recipe, not a `spreadrl grpo` one",
        ),
        (
            ["sft", "--config", "tiny-cpu"],
            "tiny-cpu is a `spreadrl grpo` recipe, not a `spreadrl sft` one",
        ),
        (
            ["plan", "sft-tiny-cpu"],
            "sft-tiny-cpu is a `spreadrl sft` recipe, not a `spreadrl grpo` one",
        ),
    ],
    ids=["grpo-given-sft", "sft-given-grpo", "plan-given-sft"],
)
def test_a_recipe_for_another_command_names_that_command(monkeypatch, capsys, argv, expected):
    code, _, err = cli(monkeypatch, capsys, *argv)
    line = one_error_line(err)
    assert code == 1 and expected in line and "unknown key" not in line, line


def test_a_command_line_typo_is_blamed_on_the_command_line(tmp_path, monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "grpo", "--config", "tiny-cpu", "rollout.group_sise=2")
    line = one_error_line(err)
    assert code == 1
    assert line.startswith("error: command line rollout.group_sise=2: unknown key"), line
    assert "tiny-cpu" not in line and "did you mean 'group_size'" in line
    recipe = tmp_path / "mine.yaml"  # the same typo in a file is the file's
    recipe.write_text("rollout:\n  group_sise: 2\n")
    code, _, err = cli(monkeypatch, capsys, "grpo", "--config", str(recipe), "steps=2")
    line = one_error_line(err)
    assert code == 1 and line.startswith(f"error: {recipe}: unknown key 'rollout.group_sise'")


# ---- eval --help's examples name models; a run folder given as a model says which ----


def test_eval_help_examples_name_model_folders_not_run_folders():
    from spreadrl.cli.eval import EXAMPLES

    models = re.findall(r"--model (runs/\S+)", EXAMPLES)
    assert models  # a demo run's model is <run>/grpo/final, as `spreadrl demo` writes it
    assert all(m.endswith("/final") for m in models), models


def test_eval_of_a_run_folder_points_at_its_model(tmp_path, monkeypatch, capsys):
    from spreadrl.run_folder import RunIdentity, claim_run_folder

    monkeypatch.chdir(tmp_path)
    claim_run_folder(Path("runs/demo/grpo"), RunIdentity("grpo", {"steps": 1}))
    (Path("runs/demo/grpo/final")).mkdir()
    code, _, err = cli(
        monkeypatch, capsys, "eval", "--model", "runs/demo/grpo", "--backend", "hf", "--tasks",
        "builtin:demo-test", "--samples", "4", "--out", "runs/eval",
    )  # fmt: skip
    line = one_error_line(err)
    assert code == 1 and not Path("runs/eval").exists()
    assert "runs/demo/grpo is a run folder, not a model; its final model is" in line, line


# ---- a stopped data synth leaves nothing that data info and synth disagree on ----


def test_after_a_stopped_synth_data_info_suggests_a_command_that_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [sys.executable, "-m", "spreadrl", "data", "synth", "--out", "syn", "--n", "5000"]
    code, err = ctrl_c_when(  # once tasks are being written
        argv,
        lambda: any(
            p.is_dir() for p in (*tmp_path.glob(".syn.*/synth-*"), *tmp_path.glob("syn/synth-*"))
        ),
    )
    assert code == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "stopped: syn was left as it was (nothing half-written)"
    info = subprocess.run(
        [sys.executable, "-m", "spreadrl", "data", "info", "syn"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert info.returncode == 1 and "Traceback" not in info.stderr
    suggested = re.search(r"`(spreadrl data synth --out \S+)`", info.stderr)
    assert suggested, info.stderr
    command = suggested.group(1).split()[1:] + ["--n", "2"]
    rerun = subprocess.run(
        [sys.executable, "-m", "spreadrl", *command], capture_output=True, text=True, timeout=120
    )
    assert rerun.returncode == 0, rerun.stderr
    assert os.listdir(tmp_path / "syn")


# ---- a resumed eval keeps the first session's time ----


def test_a_resumed_eval_adds_its_time_to_the_first_sessions(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", "ev"]
    assert cli(monkeypatch, capsys, *argv)[0] == 0
    first = json.loads(Path("ev/report.json").read_text())
    lines = Path("ev/trajectories.jsonl").read_text().splitlines(keepends=True)
    Path("ev/trajectories.jsonl").write_text("".join(lines[: len(lines) // 2]))  # stopped halfway
    code, out, _ = cli(monkeypatch, capsys, *argv)
    assert code == 0 and "resuming the eval" in out
    second = json.loads(Path("ev/report.json").read_text())
    assert second["wall_s_sessions"][0] == first["wall_s"]
    assert len(second["wall_s_sessions"]) == 2
    assert second["wall_s"] == pytest.approx(sum(second["wall_s_sessions"]))
    for key, value in first["timings"].items():
        assert second["timings"][key] >= value


def test_a_resume_after_a_torn_last_line_loses_no_episode(tmp_path, monkeypatch, capsys):
    """A killed eval can leave its last trajectory half-written (no newline); the
    episodes a resume appends must not run on from it (the first was lost that way)."""
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--out", "ev"]
    assert cli(monkeypatch, capsys, *argv)[0] == 0
    lines = Path("ev/trajectories.jsonl").read_text().splitlines(keepends=True)
    Path("ev/trajectories.jsonl").write_text("".join(lines[:10]) + lines[10][:50])
    code, _, err = cli(monkeypatch, capsys, *argv)
    assert code == 0, err
    report = json.loads(Path("ev/report.json").read_text())
    assert report["episodes"] == 64 and report["complete"] is True
    rows = [json.loads(line) for line in Path("ev/trajectories.jsonl").read_text().splitlines()]
    assert len({(r["task_id"], r["case"], r["sample"]) for r in rows}) == len(rows) == 64


def test_a_full_disk_stops_an_eval_in_one_line_and_the_same_command_finishes_it(
    tmp_path, monkeypatch, capsys
):
    """A full disk while an eval appends its episodes used to end in a traceback."""
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--backend", "oracle", "--tasks", "builtin:demo-test", "--batch-size", "8"]
    argv += ["--out", "ev"]
    real_open = Path.open

    def fills_after_ten_episodes(path, mode="r", *a, **kw):
        fh = real_open(path, mode, *a, **kw)
        return FillsUp(fh, 10) if path.name == "trajectories.jsonl" and mode == "a" else fh

    monkeypatch.setattr(Path, "open", fills_after_ten_episodes)
    code, _, err = cli(monkeypatch, capsys, *argv)
    monkeypatch.setattr(Path, "open", real_open)  # space freed
    line = one_error_line(err)
    assert code == 1
    trajectories = Path("ev", "trajectories.jsonl")  # as the user named the folder
    assert f"no space left on device writing {trajectories}; the command stopped there" in line
    assert "an eval or a data sft-build goes on from the episodes it kept" in line
    assert len(trajectories.read_text().splitlines()) == 11  # ten episodes and a torn one

    code, out, err = cli(monkeypatch, capsys, *argv)
    assert code == 0 and "resuming the eval" in out, err
    report = json.loads(Path("ev/report.json").read_text())
    assert report["complete"] is True and report["episodes"] == 64
    assert report["pass@1"] == 1.0  # the oracle passes every case, the kept ones included
    rows = [json.loads(line) for line in trajectories.read_text().splitlines()]
    assert len({(r["task_id"], r["case"], r["sample"]) for r in rows}) == len(rows) == 64


def test_a_full_disk_stops_data_synth_in_one_line_naming_its_folder(tmp_path, monkeypatch, capsys):
    """The workbook writer's error on a full disk names no file; the line names --out, and
    the staging folder the tasks were written in is gone, so the same command runs again."""
    from openpyxl import Workbook

    monkeypatch.chdir(tmp_path)
    real_save, saved = Workbook.save, []

    def full_after_five_workbooks(workbook, filename):
        saved.append(filename)
        if len(saved) > 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(workbook, filename)

    monkeypatch.setattr(Workbook, "save", full_after_five_workbooks)
    argv = ["data", "synth", "--out", "tasks", "--n", "8"]
    code, _, err = cli(monkeypatch, capsys, *argv)
    monkeypatch.setattr(Workbook, "save", real_save)  # space freed
    line = one_error_line(err)
    assert code == 1 and "no space left on device writing tasks; the command stopped" in line
    assert os.listdir(tmp_path) == []
    code, out, err = cli(monkeypatch, capsys, *argv)
    assert code == 0 and "wrote 8 tasks" in out, err


def test_a_full_disk_stops_model_init_in_one_line_and_leaves_no_half_model(
    tmp_path, monkeypatch, capsys
):
    """safetensors' writer reports a full disk as a SafetensorError naming the OS error: it
    was a traceback, and the half-written folder made the same command refuse its --out."""
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as disk:
        safetensors_fills_the_disk(disk)
        code, _, err = cli(monkeypatch, capsys, "model", "init", "--out", "m")
    line = one_error_line(err)
    assert code == 1 and "no space left on device writing m; the command stopped" in line
    assert os.listdir(tmp_path) == []
    code, out, err = cli(monkeypatch, capsys, "model", "init", "--out", "m")
    assert code == 0 and (tmp_path / "m" / "model.safetensors").is_file(), err


def test_a_ctrl_c_eval_says_what_it_kept_and_the_same_command_finishes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [sys.executable, "-m", "spreadrl", "eval", "--backend", "oracle"]
    argv += ["--tasks", "builtin:demo-test", "--batch-size", "2", "--out", "ev"]
    written = tmp_path / "ev" / "trajectories.jsonl"
    code, err = ctrl_c_when(  # once two episodes are written
        argv, lambda: written.is_file() and written.read_text().count("\n") >= 2, timeout_s=240
    )
    assert code == 130 and "Traceback" not in err, err
    stopped = json.loads(Path("ev/report.json").read_text())
    assert stopped["complete"] is False and stopped["episodes_planned"] == 64
    assert 2 <= stopped["episodes"] < 64
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"stopped: {stopped['episodes']} of 64 episodes finished"), err
    assert "the same command runs the rest" in line

    again = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr
    report = json.loads(Path("ev/report.json").read_text())
    assert report["complete"] is True and report["episodes"] == 64
    assert report["pass@1"] == 1.0  # the oracle passes every case, the kept ones included


# ---- a refusal comes before torch and transformers are imported ----

_PROBE = """
import sys
from spreadrl.cli.main import main
sys.argv = ["spreadrl", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print("EXIT", exc.code, "HEAVY", ",".join(heavy) or "-", file=sys.stderr)
"""

QUICK_REFUSALS = [
    ["grpo", "--config", "tiny-cpu", "rollout.group_sise=2"],
    ["sft", "--config", "sft-tiny-cpu", "stepz=3"],
    ["merge", "--checkpoint", "runs/nope", "--out", "models/x"],
    ["merge", "--checkpoint", "runs", "--out", "models/x", "--dtype", "flot16"],
    ["plan", "tiny-cpu", "rollout.group_sise=2"],
    ["model", "init", "--preset", "tinyy", "--out", "models/x"],
    ["model", "info", "runs/nope"],
    ["serve", "--model", "runs/nope/final", "--port", "0"],
]


@pytest.mark.parametrize("argv", QUICK_REFUSALS, ids=[" ".join(a) for a in QUICK_REFUSALS])
def test_a_typo_is_refused_before_torch_loads(tmp_path, argv):
    (tmp_path / "runs").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    lines = done.stderr.strip().splitlines()
    assert lines[-2].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert lines[-1] == "EXIT 1 HEAVY -", done.stderr

"""`eval compare` says when two reports do not cover the same cases; `check --outputs`
refuses a folder none of whose workbooks belongs to the task set (issue 32)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.errors import SpreadrlError
from tests.cli.test_check_cli import _task_set

runner = CliRunner()


def _report(folder: Path, per_case: dict[str, float], tasks: str) -> Path:
    folder.mkdir(parents=True)
    rate = sum(per_case.values()) / len(per_case)
    (folder / "report.json").write_text(json.dumps({"pass@1": rate, "per_case": per_case}))
    (folder / "config.yaml").write_text(f"eval:\n  tasks: {tasks}\n")
    return folder


def _compare(a: Path, b: Path) -> str:
    result = runner.invoke(app, ["eval", "compare", str(a), str(b)], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def test_compare_of_unrelated_task_sets_warns_and_measures_no_change(tmp_path):
    a = _report(tmp_path / "a", {"synth-1/1": 1.0, "synth-2/1": 0.0}, "data/synth")
    b = _report(tmp_path / "b", {"demo-1/1": 0.0, "demo-2/1": 1.0}, "builtin:demo-test")
    out = _compare(a, b)
    assert "share no case" in out
    assert "data/synth" in out and "builtin:demo-test" in out  # the task sets are shown
    assert "pass@1 change" not in out


def test_compare_of_partly_shared_cases_warns_and_measures_the_shared_ones(tmp_path):
    a = _report(tmp_path / "a", {"t/1": 0.0, "t/2": 0.0, "t/3": 1.0, "x/1": 1.0}, "set-a")
    b = _report(tmp_path / "b", {"t/1": 1.0, "t/2": 0.0, "t/3": 1.0, "y/1": 0.0}, "set-b")
    out = _compare(a, b)
    assert "share 3 cases only" in out
    # paired change over t/1..t/3: mean of (1, 0, 0) = +33.3 points, with its interval
    assert "pass@1 change: +33.3 ± 65.3 points" in out and "over 3 shared cases" in out


def test_compare_of_the_same_cases_gives_no_warning(tmp_path):
    a = _report(tmp_path / "a", {"t/1": 0.0, "t/2": 1.0}, "set")
    b = _report(tmp_path / "b", {"t/1": 1.0, "t/2": 1.0}, "set")
    out = _compare(a, b)
    assert "warning" not in out and "pass@1 change: +50.0" in out


def test_compare_warns_of_a_stopped_evals_report(tmp_path):
    a = _report(tmp_path / "a", {"t/1": 0.0, "t/2": 1.0}, "set")
    b = _report(tmp_path / "b", {"t/1": 1.0, "t/2": 1.0}, "set")
    stopped = json.loads((b / "report.json").read_text())
    stopped.update(episodes=2, episodes_planned=8, complete=False)
    (b / "report.json").write_text(json.dumps(stopped))
    out = _compare(a, b)
    assert f"warning: {b} is a stopped eval: 2 of 8 episodes" in out
    assert f"{a} is a stopped eval" not in out  # a report without the fields: no warning


def test_check_outputs_with_no_matching_workbook_exits_non_zero(tmp_path):
    tasks = _task_set(tmp_path / "tasks")
    other = tmp_path / "other"
    other.mkdir()
    (other / "1_someone-else_output.xlsx").write_bytes(b"")
    result = runner.invoke(app, ["check", str(tasks), "--outputs", str(other)])
    assert result.exit_code == 1  # main() prints the SpreadrlError as one error line
    assert isinstance(result.exception, SpreadrlError)
    assert "no output workbook matches a task" in str(result.exception)


def test_eval_skip_bad_names_each_skipped_task(tmp_path):
    tasks = tmp_path / "tasks"
    made = runner.invoke(app, ["data", "synth", "--out", str(tasks), "--n", "2", "--cases", "1"])
    assert made.exit_code == 0, made.output
    broken = sorted(p for p in tasks.iterdir() if p.is_dir())[0]
    next(broken.glob("1_*_answer.xlsx")).unlink()
    result = runner.invoke(
        app,
        ["eval", "--backend", "oracle", "--tasks", str(tasks), "--skip-bad"]
        + ["--out", str(tmp_path / "eval")],
        terminal_width=200,
    )
    assert result.exit_code == 0, result.output
    assert f"skipped task {broken.name}:" in result.output

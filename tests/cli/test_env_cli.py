"""`spreadrl env tools` and `spreadrl env replay`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.data.task import write_dataset_index
from spreadrl.errors import SpreadrlError
from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer

runner = CliRunner()


def test_tools_json_and_table():
    result = runner.invoke(app, ["env", "tools", "--preset", "minimal", "--json"])
    assert result.exit_code == 0, result.output
    names = [s["function"]["name"] for s in json.loads(result.output)]
    assert names == ["recalculate_and_read", "code_interpreter"]
    table = runner.invoke(app, ["env", "tools"])
    assert (
        table.exit_code == 0 and "fill_formula" in table.output and "delete_columns" in table.output
    )
    bad = runner.invoke(app, ["env", "tools", "--preset", "huge"])
    assert isinstance(bad.exception, SpreadrlError) and "minimal, full" in str(bad.exception)


def _task_dir(tmp_path: Path) -> Path:
    task = make_task(tmp_path, revenue_answer)
    write_dataset_index(tmp_path, [task])
    return tmp_path


def test_replay_by_id_prints_reward_observations_and_mismatches(tmp_path):
    root = _task_dir(tmp_path)
    traj = tmp_path / "traj.json"
    calls = [
        {"name": "write_range", "arguments": {"range": "D2", "values": "=B2*C2"}},
        {"name": "fill_formula", "arguments": {"source": "D2", "target": "D3:D5"}},
        {"name": "write_cells", "arguments": {}},
    ]
    traj.write_text(json.dumps({"task": "t1", "case": 1, "calls": calls}))
    out = tmp_path / "kept.xlsx"
    result = runner.invoke(
        app, ["env", "replay", str(traj), "--tasks", str(root), "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["reward"] == 0.0 and data["task"] == "t1"
    assert [s["ok"] for s in data["steps"]] == [True, True, False]
    assert data["steps"][2]["observation"].startswith("Error: unknown tool")
    assert data["mismatches"] == [
        {
            "sheet": "Sheet1",
            "cell": "D6",
            "expected": 6,
            "actual": None,
            "reason": "cell is empty",
        }
    ]
    assert out.is_file() and data["output_path"] == str(out)


def test_replay_by_task_folder_solves(tmp_path):
    root = _task_dir(tmp_path)
    traj = tmp_path / "traj.json"
    calls = [
        {"name": "write_range", "arguments": {"range": "D2", "values": "=B2*C2"}},
        {"name": "fill_formula", "arguments": {"source": "D2", "target": "D3:D6"}},
    ]
    traj.write_text(json.dumps({"task": str(root / "task"), "case": 1, "calls": calls}))
    result = runner.invoke(app, ["env", "replay", str(traj)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["reward"] == 1.0


def test_replay_bad_trajectories(tmp_path):
    traj = tmp_path / "traj.json"
    traj.write_text("{not json")
    assert "cannot read the trajectory" in str(
        runner.invoke(app, ["env", "replay", str(traj)]).exception
    )
    traj.write_text(json.dumps({"task": "t1", "calls": [{"arguments": {}}]}))
    assert "calls[0]" in str(runner.invoke(app, ["env", "replay", str(traj)]).exception)
    traj.write_text(json.dumps({"task": "t1", "calls": []}))
    assert "--tasks" in str(runner.invoke(app, ["env", "replay", str(traj)]).exception)


def test_help_has_examples():
    result = runner.invoke(app, ["env", "replay", "--help"])
    assert result.exit_code == 0 and "spreadrl env replay traj.json --tasks" in result.output

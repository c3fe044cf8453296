"""Every command that reads a task set takes ``builtin:<split>`` as the README says a
task-set argument may be, not only a folder (``data info builtin:test`` used to answer
"no dataset.json" and suggest ``data synth --out builtin:test``)."""

from __future__ import annotations

import json
import shutil

from spreadrl.data.builtin import builtin_tasks
from tests.cli.test_cli_mistakes import cli, one_error_line


def test_data_info_split_and_filter_read_a_builtin_split(tmp_path, monkeypatch, capsys):
    tasks = builtin_tasks("demo-test")
    code, out, err = cli(monkeypatch, capsys, "data", "info", "builtin:demo-test", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["tasks"] == len(tasks) and summary["root"] == str(tasks.root)

    code, _, err = cli(monkeypatch, capsys, "data", "split", "builtin:demo-test", "--out",
                       str(tmp_path / "splits"))  # fmt: skip
    assert code == 0, err
    counts = [len(json.loads((tmp_path / "splits" / s / "dataset.json").read_text()))
              for s in ("train", "val", "test")]  # fmt: skip
    assert sum(counts) == len(tasks)

    code, _, err = cli(monkeypatch, capsys, "data", "filter", "builtin:demo-test", "--out",
                       str(tmp_path / "kept"))  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "kept" / "dataset.json").read_text())


def test_check_and_replay_find_tasks_of_a_builtin_split(tmp_path, monkeypatch, capsys):
    out = tmp_path / "oracle"
    code, _, err = cli(monkeypatch, capsys, "eval", "--backend", "oracle", "--tasks",
                       "builtin:demo-test", "--out", str(out))  # fmt: skip
    assert code == 0, err
    code, printed, err = cli(monkeypatch, capsys, "check", "builtin:demo-test", "--outputs",
                             str(out / "outputs"))  # fmt: skip
    assert code == 0, err
    assert "soft accuracy 100.00%" in printed

    task = builtin_tasks("demo-test").tasks[0]
    solution = tmp_path / "solution.json"  # away from its task folder: found by id
    shutil.copy(task.folder / f"1_{task.id}_solution.json", solution)
    code, printed, err = cli(monkeypatch, capsys, "env", "replay", str(solution), "--tasks",
                             "builtin:demo-test")  # fmt: skip
    assert code == 0, err
    result = json.loads(printed)
    assert result["task"] == task.id and result["passed"] is True and result["reward"] == 1.0


def test_a_task_set_of_another_kind_is_refused_in_one_line(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "data", "info", "builtin-code:test")
    assert code == 1
    assert "not a spreadsheet task set" in one_error_line(err)


def test_a_file_where_a_folder_is_wanted_is_named_a_file(tmp_path, monkeypatch, capsys):
    """Not "no dataset.json ... create one with `data synth --out FILE`", a command that
    would fail there too; a task set's own dataset.json points at its folder."""
    note = tmp_path / "notes.txt"
    note.write_text("mine")
    code, _, err = cli(monkeypatch, capsys, "data", "info", str(note))
    assert code == 1
    assert one_error_line(err) == f"error: {note}: a file, not a task set folder"
    index = builtin_tasks("demo-test").root / "dataset.json"
    code, _, err = cli(monkeypatch, capsys, "data", "info", str(index))
    assert one_error_line(err).endswith(f"give its folder, {index.parent}")
    code, _, err = cli(monkeypatch, capsys, "check", "builtin:demo-test", "--outputs", str(note))
    assert one_error_line(err) == f"error: --outputs {note}: a file, not a folder"

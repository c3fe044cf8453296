"""`spreadrl data synth|import|info|builtin` through the real typer app."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.data.task import load_tasks
from spreadrl.errors import SpreadrlError, TaskFormatError
from tests.data.fake_sources import add_sb_task, make_spreadsheetbench
from tests.data.srl_release import make_release

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, ["data", *args], env={"COLUMNS": "200"})


def test_data_help_lists_every_command_without_placeholders():
    result = _run("--help")
    assert result.exit_code == 0
    listed = re.findall(r"^│ ([a-z][a-z-]*) ", result.output, flags=re.MULTILINE)
    expected = {"synth", "import", "info", "builtin", "download", "filter", "split", "sft-build"}
    assert expected <= set(listed)
    assert "placeholder" not in result.output.lower()
    assert "not implemented" not in result.output.lower()


@pytest.mark.parametrize("command", ["synth", "import", "info", "builtin"])
def test_each_command_has_examples(command):
    result = _run(command, "--help")
    assert result.exit_code == 0
    assert "Examples" in result.output and f"spreadrl data {command}" in result.output


def test_synth_list_prints_families():
    from spreadrl.data.synth import describe_families

    result = _run("synth", "--list")
    assert result.exit_code == 0
    for row in describe_families():
        assert row["name"] in result.output


def test_synth_writes_a_task_set(tmp_path):
    result = _run("synth", "--out", str(tmp_path / "s"), "--n", "2", "--seed", "3", "--cases", "1")
    assert result.exit_code == 0, result.output
    assert "wrote 2 tasks" in result.output
    tasks = load_tasks(tmp_path / "s")
    assert len(tasks) == 2 and all(len(t.cases) == 1 for t in tasks)


def test_synth_checks_every_case_with_the_env_checker(tmp_path, monkeypatch):
    from spreadrl.env.spreadsheet import case_check

    monkeypatch.setattr(case_check, "verify_case", lambda *args: ["the answer is wrong"])
    result = _run("synth", "--out", str(tmp_path / "s"), "--n", "1", "--seed", "3")
    assert result.exit_code != 0 and "the answer is wrong" in str(result.exception)


def test_synth_needs_out_and_n():
    result = _run("synth", "--n", "2")
    assert result.exit_code == 1 and "--out" in str(result.exception)


def test_import_spreadsheetbench_and_info(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb", verified=True)
    out = tmp_path / "out"
    result = _run("import", "--from", "spreadsheetbench", str(src), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "imported 2 task(s)" in result.output
    info = _run("info", str(out))
    assert info.exit_code == 0
    assert "Cell-Level Manipulation" in info.output and "spreadsheetbench" in info.output
    as_json = _run("info", str(out), "--json")
    summary = json.loads(as_json.output)
    assert summary["tasks"] == 2 and summary["cases"] == 2


def test_import_replaces_only_its_own_output_and_only_with_overwrite(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    out = tmp_path / "out"
    first = _run("import", "--from", "spreadsheetbench", str(src), "--out", str(out))
    assert first.exit_code == 0
    again = _run("import", "--from", "spreadsheetbench", str(src), "--out", str(out))
    assert again.exit_code == 1 and "pass --overwrite" in str(again.exception)
    replaced = _run(
        "import", "--from", "spreadsheetbench", str(src), "--out", str(out), "--overwrite"
    )
    assert replaced.exit_code == 0 and len(load_tasks(out)) == 2


def test_import_never_replaces_a_folder_of_the_users_files(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for flags in ((), ("--overwrite",)):
        result = _run("import", "--from", "spreadsheetbench", str(src), "--out", str(out), *flags)
        message = str(result.exception)
        assert result.exit_code == 1 and "notes.txt" in message, message
        assert "did not write" in message and "pass --overwrite" not in message
        assert (out / "notes.txt").read_text() == "mine"


def test_import_broken_task_names_it_and_skip_bad_lists_it(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    add_sb_task(src, "777", files=False)
    out = tmp_path / "out"
    result = _run("import", "--from", "spreadsheetbench", str(src), "--out", str(out))
    assert result.exit_code == 1
    assert isinstance(result.exception, TaskFormatError) and "'777'" in str(result.exception)
    skipped = _run(
        "import", "--from", "spreadsheetbench", str(src), "--out", str(out), "--skip-bad"
    )
    assert skipped.exit_code == 0
    assert "imported 2 task(s)" in skipped.output and "skipped 1" in skipped.output
    assert "777" in skipped.output


def test_import_spreadsheet_rl_release_and_one_parquet(tmp_path):
    root = make_release(tmp_path / "data", splits=("train", "test_2"))
    result = _run(
        "import", "--from", "spreadsheet-rl", str(root), "--split", "train",
        "--parser", "qwen3_coder", "--out", str(tmp_path / "a"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    task = next(iter(load_tasks(tmp_path / "a")))
    assert task.source == "spreadsheet-rl" and task.metadata["parser"] == "qwen3_coder"
    moved = tmp_path / "zips" / "spreadsheets.zip"
    moved.parent.mkdir()
    (root / "spreadsheets.zip").rename(moved)
    parquet = root / "test_2_hermes.parquet"
    result = _run(
        "import", "--from", "spreadsheet-rl", str(parquet), "--workbooks", str(moved),
        "--out", str(tmp_path / "b"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "imported 2 task(s)" in result.output


def test_import_rejects_unknown_source_and_misplaced_split(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    result = _run("import", "--from", "excel", str(src), "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "spreadsheet-rl" in str(result.exception)
    result = _run(
        "import", "--from", "spreadsheetbench", str(src), "--out", str(tmp_path / "o"),
        "--split", "test",
    )  # fmt: skip
    assert result.exit_code == 1 and "--split" in str(result.exception)


def test_info_skip_bad_lists_problems(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    native = tmp_path / "native"
    _run("import", "--from", "spreadsheetbench", str(src), "--out", str(native))
    (native / "101" / "2_101_answer.xlsx").unlink()
    strict = _run("info", str(native))
    assert strict.exit_code == 1 and "'101'" in str(strict.exception)
    result = _run("info", str(native), "--skip-bad")
    assert result.exit_code == 0
    assert "1 task(s) skipped" in result.output and "2_101_input.xlsx" in result.output
    summary = json.loads(_run("info", str(native), "--skip-bad", "--json").output)
    assert summary["tasks"] == 1 and summary["problems"][0]["task_id"] == "101"


def test_info_on_a_folder_without_dataset_json(tmp_path):
    result = _run("info", str(tmp_path))
    assert result.exit_code == 1 and isinstance(result.exception, SpreadrlError)
    assert "dataset.json" in str(result.exception)


def test_builtin_prints_location_and_copies(tmp_path, monkeypatch):
    import spreadrl.cli.data as data_cli

    src = make_spreadsheetbench(tmp_path / "sb")
    native = tmp_path / "cache" / "demo-test"
    _run("import", "--from", "spreadsheetbench", str(src), "--out", str(native))
    asked = []

    def fake_builtin_tasks(split="train", root=None):
        asked.append(split)
        return load_tasks(native)

    monkeypatch.setattr(data_cli, "builtin_tasks", fake_builtin_tasks)
    result = _run("builtin", "--split", "demo-test")
    assert result.exit_code == 0 and asked == ["demo-test"]
    assert str(native) in result.output and "2 tasks" in result.output
    copy = tmp_path / "copy"
    result = _run("builtin", "--split", "demo-test", "--out", str(copy))
    assert result.exit_code == 0, result.output
    assert len(load_tasks(copy)) == 2
    bad = _run("builtin", "--split", "valid")
    assert bad.exit_code == 1 and "demo-train" in str(bad.exception)

"""Importers of SpreadsheetBench and Spreadsheet-RL layouts into the native layout."""

from __future__ import annotations

import json

import pytest
from openpyxl import load_workbook

from spreadrl.data.importers import copy_tasks, import_spreadsheetbench
from spreadrl.data.importers.common import infer_instruction_type
from spreadrl.data.task import CELL_LEVEL, SHEET_LEVEL, load_tasks
from spreadrl.errors import SpreadrlError, TaskFormatError
from tests.data.fake_sources import (
    add_sb_task,
    make_spreadsheetbench,
    save,
    write_index,
)


def _b1(path):
    return load_workbook(path)["Data"]["B1"].value


# ---------------------------------------------------------------- SpreadsheetBench


def test_spreadsheetbench_release_layout(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    report = import_spreadsheetbench(src, tmp_path / "out")
    assert report.imported == 2 and report.skipped == []
    tasks = load_tasks(tmp_path / "out")
    first, second = tasks.get("101"), tasks.get("102")
    assert [c.index for c in first.cases] == [1, 2, 3]
    assert first.cases[2].answer_path.name == "3_101_answer.xlsx"
    assert _b1(first.cases[2].answer_path) == 30
    assert first.instruction_type == CELL_LEVEL
    assert second.instruction_type == SHEET_LEVEL  # "Sheet-Level" normalised
    assert first.source == "spreadsheetbench"
    assert first.metadata["naming"] == "release"
    assert first.folder == tmp_path / "out" / "101"


def test_spreadsheetbench_verified_naming_becomes_input_answer(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb", verified=True)
    import_spreadsheetbench(src, tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out" / "101").iterdir())
    assert names == ["1_101_answer.xlsx", "1_101_input.xlsx"]
    task = load_tasks(tmp_path / "out").get("101")
    assert task.metadata["naming"] == "verified"
    assert _b1(task.cases[0].answer_path) == 10


def test_spreadsheetbench_finds_dataset_json_one_level_down(tmp_path):
    make_spreadsheetbench(tmp_path / "download" / "spreadsheetbench_verified_400")
    report = import_spreadsheetbench(tmp_path / "download", tmp_path / "out")
    assert report.imported == 2


def test_spreadsheetbench_missing_workbook_names_task_and_file(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    (src / "spreadsheet" / "101" / "2_101_answer.xlsx").unlink()
    with pytest.raises(TaskFormatError) as info:
        import_spreadsheetbench(src, tmp_path / "out")
    message = str(info.value)
    assert "'101'" in message and "2_101_input.xlsx" in message and "answer" in message
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.*")), "staging folder left behind"


def test_spreadsheetbench_unreadable_workbook_names_the_file(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    (src / "spreadsheet" / "102" / "1_102_answer.xlsx").write_text("not a workbook")
    with pytest.raises(TaskFormatError, match=r"'102'.*1_102_answer\.xlsx.*not a readable"):
        import_spreadsheetbench(src, tmp_path / "out")


def test_spreadsheetbench_bad_answer_position_names_task_and_index(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    add_sb_task(src, "103", answer_position="A1:B2:C3")
    with pytest.raises(TaskFormatError) as info:
        import_spreadsheetbench(src, tmp_path / "out")
    assert "'103'" in str(info.value) and "dataset.json" in str(info.value)
    assert "answer_position" in str(info.value)


def test_spreadsheetbench_bad_instruction_type(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    entries = json.loads((src / "dataset.json").read_text())
    entries[0]["instruction_type"] = "Chart Manipulation"
    write_index(src, entries)
    with pytest.raises(TaskFormatError, match="'101'.*Chart Manipulation"):
        import_spreadsheetbench(src, tmp_path / "out")


def test_spreadsheetbench_unreadable_index(tmp_path):
    src = tmp_path / "sb"
    src.mkdir()
    (src / "dataset.json").write_bytes(b"\xff\xfe[not json")
    with pytest.raises(TaskFormatError, match="dataset.json"):
        import_spreadsheetbench(src, tmp_path / "out")


def test_spreadsheetbench_skip_bad_reports_every_problem(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    add_sb_task(src, "103", files=False)
    add_sb_task(src, "104", answer_position="'Sheet1'!")
    entries = json.loads((src / "dataset.json").read_text())
    entries.append(dict(entries[0]))  # duplicate id 101
    entries.append({"id": "../escape", "instruction": "x", "answer_position": "A1"})
    write_index(src, entries)
    report = import_spreadsheetbench(src, tmp_path / "out", skip_bad=True)
    assert report.imported == 2
    reasons = {p.task_id: p.message for p in report.skipped}
    assert set(reasons) == {"103", "104", "101", "#5"}
    assert "no test case" in reasons["103"]
    assert "answer_position" in reasons["104"]
    assert "duplicate" in reasons["101"]
    assert "folder name" in reasons["#5"]
    assert len(load_tasks(tmp_path / "out")) == 2


def test_nothing_importable_is_an_error(tmp_path):
    src = tmp_path / "sb"
    write_index(src, [])
    add_sb_task(src, "1", files=False)
    with pytest.raises(TaskFormatError, match="no task could be imported"):
        import_spreadsheetbench(src, tmp_path / "out", skip_bad=True)
    assert not (tmp_path / "out").exists()


def test_refuses_non_empty_out_and_overwrite_replaces_only_an_import(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    for overwrite in (False, True):  # files the import did not write: kept, whatever the flag
        with pytest.raises(SpreadrlError, match="keep.txt.*did not write"):
            import_spreadsheetbench(src, out, overwrite=overwrite)
    assert (out / "keep.txt").read_text() == "precious"
    (out / "keep.txt").unlink()
    import_spreadsheetbench(src, out)
    with pytest.raises(SpreadrlError, match="not empty.*--overwrite"):
        import_spreadsheetbench(src, out)
    import_spreadsheetbench(src, out, overwrite=True)
    assert len(load_tasks(out)) == 2


def test_failed_overwrite_keeps_previous_contents(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    out = tmp_path / "out"
    import_spreadsheetbench(src, out)
    add_sb_task(src, "103", files=False)
    with pytest.raises(TaskFormatError):
        import_spreadsheetbench(src, out, overwrite=True)
    assert len(load_tasks(out)) == 2


def test_refuses_out_inside_source(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    with pytest.raises(SpreadrlError, match="overlap"):
        import_spreadsheetbench(src, src / "converted", overwrite=True)


# ---------------------------------------------------------------- Spreadsheet-RL folders


@pytest.mark.parametrize(
    ("position", "expected"),
    [
        ("B1", CELL_LEVEL),
        ("D2:D10", CELL_LEVEL),
        ("'Sheet 1'!E5:F9", CELL_LEVEL),
        ("A1:G30", SHEET_LEVEL),
        ("A:G", SHEET_LEVEL),
        ("Sheet1!A1:B2,Sheet2!A1", SHEET_LEVEL),
    ],
)
def test_infer_instruction_type(position, expected):
    assert infer_instruction_type(position) == expected


# ---------------------------------------------------------------- copy_tasks


def test_copy_tasks_keeps_solutions_and_metadata(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    import_spreadsheetbench(src, tmp_path / "native")
    solution = tmp_path / "native" / "102" / "1_102_solution.json"
    solution.write_text(json.dumps({"task": "102", "case": 1, "calls": []}))
    save(tmp_path / "native" / "102" / "unrelated.xlsx", 1)
    copied = copy_tasks(load_tasks(tmp_path / "native"), tmp_path / "copy")
    task = copied.get("102")
    assert task.cases[0].load_solution() == []
    assert task.metadata["naming"] == "release"
    assert not (tmp_path / "copy" / "102" / "unrelated.xlsx").exists()
    with pytest.raises(SpreadrlError, match="not empty"):
        copy_tasks(load_tasks(tmp_path / "native"), tmp_path / "copy")

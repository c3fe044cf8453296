"""The checker never passes having compared zero cells (a check that checks nothing)."""

from __future__ import annotations

from pathlib import Path

import openpyxl

from spreadrl.env.spreadsheet.checker import check_workbook


def test_column_range_over_an_empty_answer_sheet_fails_instead_of_passing(tmp_path: Path) -> None:
    answer, output = openpyxl.Workbook(), openpyxl.Workbook()
    answer.active["A1"] = 1
    answer.create_sheet("Sheet2")  # the task: "clear Sheet2"; its answer sheet is empty
    output.active["A1"] = 1
    output.create_sheet("Sheet2")["B3"] = "left behind"
    answer.save(tmp_path / "a.xlsx")
    output.save(tmp_path / "o.xlsx")
    result = check_workbook(tmp_path / "o.xlsx", tmp_path / "a.xlsx", "Sheet2!A:C")
    assert not result.passed
    assert result.checked_cells == 0
    assert "covers no cell" in result.errors[0] and "Sheet2!A:C" in result.errors[0]
    # the same range over a sheet with cells is checked as before
    assert check_workbook(tmp_path / "o.xlsx", tmp_path / "a.xlsx", "Sheet!A:C").passed

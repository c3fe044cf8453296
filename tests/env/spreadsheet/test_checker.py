"""The checker applies SpreadsheetBench's value rules cell by cell."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.spreadsheet.checker import (
    CheckResult,
    check_workbook,
    normalize_value,
    values_match,
)
from spreadrl.errors import WorkbookError


def book(path: Path, cells: dict[str, object], *, title: str = "Sheet1", extra: dict | None = None):
    """Write a workbook whose first sheet holds ``cells`` (and optional extra sheets)."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = title
    for ref, value in cells.items():
        ws[ref] = value
    for name, more in (extra or {}).items():
        sheet = wb.create_sheet(name)
        for ref, value in more.items():
            sheet[ref] = value
    wb.save(path)
    return path


def check(tmp_path: Path, answer: dict, output: dict, position: str, **kw) -> CheckResult:
    a = book(tmp_path / "answer.xlsx", answer, **kw)
    o = book(tmp_path / "output.xlsx", output, **kw)
    return check_workbook(o, a, position)


@pytest.mark.parametrize(
    ("expected", "actual", "same"),
    [
        (1.004, 1.0, True),  # rounding to 2 places
        (1.006, 1.0, False),
        (3, 3.0, True),
        (True, 1, True),  # bools count as numbers
        (False, 0, True),
        (True, "1", True),
        ("1e3", 1000, True),  # numeric strings parsed like float()
        (" 42 ", 42, True),
        ("abc", "abc", True),
        ("abc", "ABC", False),
        ("", None, True),  # empty == ""
        (None, None, True),
        (0, None, False),  # 0 is not empty
        (0, "", False),
        (dt.time(13, 45, 10), dt.time(13, 45, 59), True),  # "HH:MM"
        (dt.time(13, 45), "13:45", True),
        (dt.datetime(2024, 1, 5), 45296, True),  # serial days
        (dt.datetime(2024, 1, 5, 13, 0), dt.datetime(2024, 1, 6), True),  # past noon rounds up
        (dt.datetime(2024, 1, 5, 11, 0), dt.datetime(2024, 1, 5), True),
        (dt.datetime(2024, 1, 5, 13, 0), 45296.54, False),
        ("x", 1, False),
    ],
)
def test_value_rules(expected: object, actual: object, same: bool) -> None:
    assert values_match(expected, actual) is same
    assert values_match(actual, expected) is same


def test_normalize_value_examples() -> None:
    assert normalize_value(True) == 1.0
    assert normalize_value(dt.time(9, 5)) == "09:05"
    assert normalize_value(dt.datetime(1900, 1, 1)) == 2.0
    assert normalize_value("n/a") == "n/a"


def test_passes_and_reports_each_mismatch(tmp_path: Path) -> None:
    ok = check(tmp_path, {"A1": 1, "A2": "x"}, {"A1": 1.001, "A2": "x"}, "A1:A2")
    assert ok.passed and ok.checked_cells == 2 and ok.mismatches == [] and ok.errors == []
    bad = check(tmp_path, {"A1": 1, "B1": 2}, {"A1": 5, "B1": 2}, "A1:B1")
    assert not bad.passed
    assert [(m.sheet, m.cell, m.expected, m.actual) for m in bad.mismatches] == [
        ("Sheet1", "A1", 1, 5)
    ]


def test_range_is_walked_column_by_column(tmp_path: Path) -> None:
    result = check(tmp_path, {"A1": 1, "A2": 2, "B1": 3, "B2": 4}, {}, "A1:B2")
    assert [m.cell for m in result.mismatches] == ["A1", "A2", "B1", "B2"]


def test_datetime_written_and_computed_by_formula_compare_equal(tmp_path: Path) -> None:
    result = check(
        tmp_path,
        {"A1": dt.datetime(2024, 1, 5), "B1": dt.datetime(2024, 1, 5, 18, 0)},
        {"A1": "=DATE(2024,1,5)", "B1": "=DATE(2024,1,5)+1"},
        "A1:B1",
    )
    assert result.passed, result.mismatches


def test_formulas_without_cached_values_are_recalculated(tmp_path: Path) -> None:
    answer = {"A1": 2, "A2": 3, "A3": 5}
    good = check(tmp_path, answer, {"A1": 2, "A2": 3, "A3": "=SUM(A1:A2)"}, "A3")
    assert good.passed, good.mismatches
    wrong = check(tmp_path, answer, {"A1": 2, "A2": 3, "A3": "=A1*A2"}, "A3")
    assert not wrong.passed
    assert wrong.mismatches[0].actual == 6
    # an answer whose formulas lack cached values is recalculated too
    both = check(tmp_path, {"A1": 2, "A3": "=A1+3"}, {"A1": 2, "A3": 5}, "A3")
    assert both.passed


def test_unsupported_function_is_a_per_cell_error(tmp_path: Path) -> None:
    result = check(tmp_path, {"A1": 5, "A2": 1}, {"A1": '=WEBSERVICE("x")', "A2": 1}, "A1:A2")
    assert not result.passed
    assert [m.cell for m in result.mismatches] == ["A1"]
    assert "could not evaluate" in result.mismatches[0].reason
    assert len(result.errors) == 1 and "webservice" in result.errors[0].lower()


def test_ordinary_error_values_compare_as_text(tmp_path: Path) -> None:
    same = check(tmp_path, {"A1": "#DIV/0!"}, {"A1": "=1/0"}, "A1")
    assert same.passed and same.errors == []
    empty = check(tmp_path, {"A1": None}, {"A1": "=1/0"}, "A1")
    assert not empty.passed


def test_missing_output_and_missing_sheet_fail_with_reason(tmp_path: Path) -> None:
    answer = book(tmp_path / "answer.xlsx", {"A1": 1}, extra={"Totals": {"B2": 9}})
    missing = check_workbook(tmp_path / "nope.xlsx", answer, "A1")
    assert not missing.passed and "does not exist" in missing.mismatches[0].reason
    output = book(tmp_path / "output.xlsx", {"A1": 1})
    no_sheet = check_workbook(output, answer, "Totals!B2")
    assert not no_sheet.passed and "missing from output" in no_sheet.mismatches[0].reason
    corrupt = tmp_path / "corrupt.xlsx"
    corrupt.write_text("not a zip")
    assert not check_workbook(corrupt, answer, "A1").passed


def test_unreadable_answer_raises_naming_file(tmp_path: Path) -> None:
    bad = tmp_path / "answer.xlsx"
    bad.write_text("junk")
    output = book(tmp_path / "output.xlsx", {"A1": 1})
    with pytest.raises(WorkbookError, match="answer.xlsx"):
        check_workbook(output, bad, "A1")


def test_no_sheet_means_answer_first_sheet_by_name(tmp_path: Path) -> None:
    answer = book(tmp_path / "a.xlsx", {"A1": 1}, title="Data", extra={"Other": {"A1": 2}})
    wb = openpyxl.Workbook()
    wb.active.title = "Other"
    wb.active["A1"] = 2
    wb.create_sheet("Data")["A1"] = 1
    wb.save(tmp_path / "o.xlsx")
    assert check_workbook(tmp_path / "o.xlsx", answer, "A1").passed


def test_sheet_names_with_commas_and_quotes(tmp_path: Path) -> None:
    extra = {"Sales, 2023": {"B2": 7}, "It's": {"C1": "ok"}}
    result = check(tmp_path, {"A1": 0}, {"A1": 0}, "'Sales, 2023'!B2,'It''s'!C1,A1", extra=extra)
    assert result.passed and result.checked_cells == 3


def test_column_only_range_bounded_by_answer_rows(tmp_path: Path) -> None:
    answer = {"A1": "h", "A2": 1, "B3": 2}
    assert check(tmp_path, answer, answer, "A:B").checked_cells == 6
    result = check(tmp_path, answer, {**answer, "A9": 5}, "A:B")
    assert result.passed  # row 9 is beyond the answer's used rows
    assert not check(tmp_path, answer, {"A1": "h", "A2": 1}, "A:B").passed


def test_merged_cells_compare_as_stored(tmp_path: Path) -> None:
    def merged(path: Path, value: object) -> Path:
        wb = openpyxl.Workbook()
        wb.active["A1"] = value
        wb.active.merge_cells("A1:B2")
        wb.save(path)
        return path

    answer = merged(tmp_path / "a.xlsx", "title")
    assert check_workbook(merged(tmp_path / "o.xlsx", "title"), answer, "A1:B2").passed
    spread = book(tmp_path / "s.xlsx", {"A1": "title", "B1": "title"}, title="Sheet")
    result = check_workbook(spread, answer, "A1:B2")
    assert [m.cell for m in result.mismatches] == ["B1"]


def test_identical_excel_error_values_compare_equal(tmp_path: Path) -> None:
    """Excel's own cached value is #NAME? and the recalculated one too: a pass, as in
    SpreadsheetBench (it compares the strings); a different value stays a failure."""
    answer = book(tmp_path / "answer.xlsx", {"A1": "#NAME?", "A2": "#NAME?"})
    assert openpyxl.load_workbook(answer).active["A1"].data_type == "e"
    output = book(tmp_path / "output.xlsx", {"A1": "=NOSUCHFUNCTION(1)", "A2": "=1+1"})
    result = check_workbook(output, answer, "A1:A2")
    assert [m.cell for m in result.mismatches] == ["A2"]
    assert result.cell_engines == {"Sheet1!A1": "ironcalc", "Sheet1!A2": "ironcalc"}


def test_engine_failure_on_both_sides_is_never_a_pass(tmp_path: Path) -> None:
    result = check(tmp_path, {"A1": "=NOSUCHFUNCTION(1)"}, {"A1": "=NOSUCHFUNCTION(1)"}, "A1")
    assert not result.passed and "could not evaluate" in result.mismatches[0].reason


def test_number_to_text_uses_excels_15_digits(tmp_path: Path) -> None:
    answer = {
        "A1": 0.8,
        "B1": "Rate: 0.8",
        "B2": "0.333333333333333",
        "B3": "0.3 total",
        "B4": "1.23456789012346E+17",
        "B5": "ID 12345678901234567",
    }
    output = {
        "A1": 0.8,
        "B1": '="Rate: "&A1',
        "B2": '=1/3&""',
        "B3": '=CONCATENATE(0.1+0.2," total")',
        "B4": '=123456789012345678&""',
        "B5": '="ID 12345678901234567"&""',
    }
    result = check(tmp_path, answer, output, "B1:B5")
    assert result.passed, result.mismatches
    assert set(result.cell_engines.values()) == {"ironcalc"}


def test_column_ranges_scan_the_workbook_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A range costs its own cells: the used-row bound is computed once, not per range."""
    from spreadrl.env.spreadsheet.recalc import values

    calls = {"n": 0}
    real = values.WorkbookValues.__post_init__

    def counting(self) -> None:
        real(self)
        model = self.model

        class Counting:
            def __getattr__(self, name: str):
                if name == "get_all_cells":
                    calls["n"] += 1
                return getattr(model, name)

        self.model = Counting()

    monkeypatch.setattr(values.WorkbookValues, "__post_init__", counting)
    cells = {f"A{r}": r for r in range(1, 6)}
    position = ",".join(["A:A"] * 200)
    result = check(tmp_path, cells, cells, position)
    assert result.passed and result.checked_cells == 1000
    assert calls["n"] <= 2  # once per workbook (answer), not once per range

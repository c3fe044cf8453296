"""Excel semantics of the reward: the 1904 date system, durations, times, TEXT formats."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import openpyxl
import pytest
from openpyxl.utils.datetime import CALENDAR_MAC_1904

from spreadrl.env.spreadsheet.checker import check_workbook, normalize_value, values_match
from spreadrl.env.spreadsheet.recalc.values import load_values
from tests.sysdeps import needs_libreoffice

needs_lo = needs_libreoffice


def _book_1904(path: Path, cells: dict[str, object], fmt: str = "yyyy-mm-dd") -> Path:
    wb = openpyxl.Workbook()
    wb.epoch = CALENDAR_MAC_1904  # openpyxl writes <workbookPr date1904="1"/>
    ws = wb.active
    for ref, value in cells.items():
        ws[ref] = value
        ws[ref].number_format = fmt
    wb.save(path)
    return path


def test_a_1904_workbook_reads_its_dates_as_openpyxl_does(tmp_path: Path) -> None:
    book = _book_1904(tmp_path / "a.xlsx", {"A1": dt.datetime(2024, 1, 5)})
    assert openpyxl.load_workbook(book, data_only=True).active["A1"].value == dt.datetime(
        2024, 1, 5
    )
    values = load_values(book)
    assert values.date1904
    assert values.value("Sheet", 1, 1) == dt.datetime(2024, 1, 5)  # not 2028-01-06


@needs_lo
def test_a_1904_workbook_recalculates_in_the_1904_system(tmp_path: Path) -> None:
    answer = _book_1904(tmp_path / "a.xlsx", {"A1": dt.datetime(2024, 1, 5), "A2": 1904})
    output = _book_1904(tmp_path / "o.xlsx", {"A1": "=DATE(2024,1,5)", "A2": "=YEAR(0)"})
    output_values = load_values(output, engine="hybrid")
    assert output_values.cell_engine("Sheet", 1, 1) == "libreoffice"
    result = check_workbook(output, answer, "A1:A1", engine="hybrid")
    assert result.passed, result.mismatches
    # IronCalc alone counts from 1900: the same output is four years and a day off
    alone = load_values(output, engine="ironcalc").value("Sheet", 1, 1)
    assert alone == dt.datetime(2028, 1, 6)


@pytest.mark.parametrize(
    ("expected", "actual", "same"),
    [
        (dt.timedelta(hours=36), dt.timedelta(hours=36, milliseconds=1), True),
        (dt.timedelta(hours=36), dt.timedelta(hours=36, seconds=1), False),
        (dt.timedelta(hours=36), 1.5, False),  # a duration is not the number of days
        (dt.timedelta(hours=12), dt.time(12, 0), False),
        (dt.time(13, 45), dt.time(13, 45, 0, 1000), True),  # str() would add ".001"
        (dt.time(9, 5), "09:05", True),
    ],
)
def test_durations_and_times(expected: object, actual: object, same: bool) -> None:
    assert values_match(expected, actual) is same


def test_duration_normal_form() -> None:
    assert normalize_value(dt.timedelta(days=1, hours=12, minutes=30)) == ("duration", 131400)
    assert normalize_value(dt.timedelta(hours=-1)) == ("duration", -3600)


def test_a_recalculated_duration_matches_excels_cached_one(tmp_path: Path) -> None:
    """``=B1-A1`` under ``[h]:mm:ss`` is a timedelta whose last bit differs from Excel's."""
    answer, output = openpyxl.Workbook(), openpyxl.Workbook()
    for wb in (answer, output):
        ws = wb.active
        ws["A1"], ws["B1"] = dt.datetime(2024, 1, 5, 8, 0, 0), dt.datetime(2024, 1, 6, 20, 10, 7)
    answer.active["C1"] = dt.timedelta(hours=36, minutes=10, seconds=7)
    output.active["C1"] = "=B1-A1"
    for wb in (answer, output):
        wb.active["C1"].number_format = "[h]:mm:ss"
    answer.save(tmp_path / "a.xlsx")
    output.save(tmp_path / "o.xlsx")
    values = load_values(tmp_path / "o.xlsx")
    assert isinstance(values.value("Sheet", 1, 3), dt.timedelta)
    assert check_workbook(tmp_path / "o.xlsx", tmp_path / "a.xlsx", "C1").passed
    answer.active["C1"] = dt.timedelta(hours=36, minutes=10, seconds=9)
    answer.save(tmp_path / "a.xlsx")
    assert not check_workbook(tmp_path / "o.xlsx", tmp_path / "a.xlsx", "C1").passed


# Excel's results for TEXT (Microsoft's TEXT function documentation and number-format
# codes); IronCalc misses the rounding of "$#,##0" and "0.00", fractions and locale tags.
TEXT_CASES = [
    (1234.5, "$#,##0", "$1,235"),
    (2.675, "0.00", "2.68"),
    (2.5, "# ?/?", "2 1/2"),
    (45458, "[$-409]mmmm d, yyyy", "June 15, 2024"),
    (45458, "mmm", "Jun"),
    (45458, "dddd", "Saturday"),
    (0.75, "h:mm AM/PM", "6:00 PM"),
    (-1234.5, "#,##0.00;(#,##0.00)", "(1,234.50)"),
    (1.5, "[h]:mm", "36:00"),
    (0, '0;-0;"zero"', "zero"),
]


@needs_lo
def test_text_formats_render_as_excel_does(tmp_path: Path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    for row, (value, code, _) in enumerate(TEXT_CASES, start=1):
        ws.cell(row, 1, value)
        ws.cell(row, 2, code)
        ws.cell(row, 3, f"=TEXT(A{row},B{row})")
        ws.cell(row, 4, f'=UPPER(TEXT(A{row},"{code.replace(chr(34), chr(34) * 2)}"))')
    wb.save(tmp_path / "t.xlsx")
    values = load_values(tmp_path / "t.xlsx", engine="hybrid")
    got = [values.value("Sheet", row, 3) for row in range(1, len(TEXT_CASES) + 1)]
    assert got == [want for _, _, want in TEXT_CASES]
    upper = [values.value("Sheet", row, 4) for row in range(1, len(TEXT_CASES) + 1)]
    assert upper == [want.upper() for _, _, want in TEXT_CASES]

"""The recalculation classes where engines part from Excel, each on a workbook built here.

Every expected value is Excel's documented result (the source is named beside it). The
output workbooks are written by openpyxl (no cached values, as an agent leaves them), so
the hybrid engine computes every cell; the checker then compares with the answer.
Values are also read at full precision, since the checker's rules round to 2 places.
"""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest
from openpyxl.worksheet.formula import ArrayFormula

from spreadrl.env.spreadsheet.checker import check_workbook
from spreadrl.env.spreadsheet.recalc.values import load_values
from tests.sysdeps import needs_libreoffice


def _check(tmp_path: Path, cases: list[tuple[str, object]], prepare=None) -> dict[str, object]:
    """Write the formulas into B1.. of an output, Excel's values into an answer; check both."""
    output, answer = openpyxl.Workbook(), openpyxl.Workbook()
    if prepare is not None:
        prepare(output.active)
        prepare(answer.active)
    for row, (formula, expected) in enumerate(cases, start=1):
        output.active.cell(row, 2, formula)
        answer.active.cell(row, 2, expected)
    output.save(tmp_path / "out.xlsx")
    answer.save(tmp_path / "answer.xlsx")
    result = check_workbook(tmp_path / "out.xlsx", tmp_path / "answer.xlsx", f"B1:B{len(cases)}")
    assert result.passed, result.mismatches
    book = load_values(tmp_path / "out.xlsx", engine="hybrid")
    sheet = book.sheet_names[0]
    return {formula: book.value(sheet, row, 2) for row, (formula, _) in enumerate(cases, start=1)}


def test_numbers_joined_into_text_have_15_significant_digits(tmp_path):
    # Excel specifications and limits: "Number precision: 15 digits"; text from a number
    # is its General format at that precision, scientific from 1E+15 up
    cases = [
        ('=1/3&""', "0.333333333333333"),
        ('=(0.1+0.2)&""', "0.3"),
        ('="x"&2/3', "x0.666666666666667"),
        ("=CONCATENATE(1/7)", "0.142857142857143"),
        ('=123456789012345678&""', "1.23456789012346E+17"),
    ]
    values = _check(tmp_path, cases)
    assert list(values.values()) == [expected for _, expected in cases]


def test_error_kinds_are_excels(tmp_path):
    def data(sheet):
        for row, value in enumerate((1, 2, 3), start=1):
            sheet.cell(row, 1, value)

    cases = [
        # INDEX: "If row_num and column_num do not point to a cell within array, INDEX
        # returns the #REF! error value"
        ("=INDEX(A1:A3,5)", "#REF!"),
        # VLOOKUP: "If col_index_num is greater than the number of columns in
        # table_array, you'll get the #REF! error value"; less than 1: #VALUE!
        ("=VLOOKUP(1,A1:A3,2,FALSE)", "#REF!"),
        ("=VLOOKUP(1,A1:A3,0,FALSE)", "#VALUE!"),
        # MID: "If start_num is less than 1, MID returns the #VALUE! error value"
        ('=MID("abc",0,1)', "#VALUE!"),
        # CHOOSE: an index_num greater than the number of values: #VALUE!
        ("=CHOOSE(4,1,2,3)", "#VALUE!"),
        # OFFSET: "If rows and cols offset reference over the edge of the worksheet,
        # OFFSET returns the #REF! error value"
        ("=OFFSET(A1,-1,0)", "#REF!"),
        # arithmetic on text that is not a number: #VALUE!
        ('="a"+1', "#VALUE!"),
    ]
    values = _check(tmp_path, cases, data)
    assert list(values.values()) == [expected for _, expected in cases]


def test_date_parts_of_1900_serials_follow_excels_leap_year(tmp_path):
    # Microsoft KB 214326, "Excel incorrectly assumes that the year 1900 is a leap year":
    # serial 60 is 1900-02-29, serial 1 1900-01-01 (a Sunday to WEEKDAY), serial 0
    # "January 0, 1900"
    cases = [
        ("=YEAR(1)", 1900),
        ("=DAY(59)", 28),
        ("=DAY(60)", 29),
        ("=MONTH(60)", 2),
        ("=DAY(61)", 1),
        ("=YEAR(0)", 1900),
        ("=MONTH(0)", 1),
        ("=DAY(0)", 0),
        ("=WEEKDAY(0)", 7),
        ("=WEEKDAY(1)", 1),
        ("=WEEKDAY(60)", 4),
        ("=DAY(A1)", 0),  # an empty cell is serial 0
    ]
    values = _check(tmp_path, cases)
    assert list(values.values()) == [expected for _, expected in cases]


@needs_libreoffice
def test_yearfrac_gives_excels_documented_examples(tmp_path):
    # Excel's YEARFRAC reference, its example: 1/1/2012 to 7/30/2012
    start, end = "DATE(2012,1,1)", "DATE(2012,7,30)"
    cases = [
        (f"=YEARFRAC({start},{end})", 0.58055556),
        (f"=YEARFRAC({start},{end},1)", 0.57650273),
        (f"=YEARFRAC({start},{end},3)", 0.57808219),
    ]
    values = _check(tmp_path, cases)
    for (formula, expected), value in zip(cases, values.values(), strict=True):
        assert value == pytest.approx(expected, abs=5e-9), formula


@needs_libreoffice
def test_legacy_array_formulas_fill_every_cell_of_their_range(tmp_path):
    # "Guidelines and examples of array formulas": a multi-cell array formula entered
    # with Ctrl+Shift+Enter computes one result per cell of its range
    output, answer = openpyxl.Workbook(), openpyxl.Workbook()
    for book in (output, answer):
        for row, (a, b) in enumerate(((1, 4), (2, 5), (3, 6)), start=1):
            book.active.cell(row, 1, a)
            book.active.cell(row, 2, b)
    output.active["C1"] = ArrayFormula("C1:C3", "=A1:A3*B1:B3")
    output.active["D1"] = ArrayFormula("D1", "=SUM(A1:A3*B1:B3)")
    for row, value in enumerate((4, 10, 18), start=1):
        answer.active.cell(row, 3, value)
    answer.active["D1"] = 32
    output.save(tmp_path / "out.xlsx")
    answer.save(tmp_path / "answer.xlsx")
    # D2:D3 are empty in the answer: a one-cell array formula must not spill there
    result = check_workbook(tmp_path / "out.xlsx", tmp_path / "answer.xlsx", "C1:D3")
    assert result.passed, result.mismatches
    assert result.cell_engines["Sheet!C2"] == "libreoffice"


@needs_libreoffice
def test_approximate_lookups_search_as_excel_does(tmp_path):
    """Approximate match is a binary search over a range Excel assumes sorted ascending
    (VLOOKUP: "the values in the first column of table_array must be placed in ascending
    sort order; otherwise, VLOOKUP might not return the correct value")."""

    def data(sheet):
        for row, (key, value) in enumerate(((10, "a"), (20, "b"), (30, "c"), (40, "d")), 1):
            sheet.cell(row, 1, key)
            sheet.cell(row, 3, value)

    cases = [
        ("=VLOOKUP(25,A1:C4,3)", "b"),  # the largest value not above 25
        ("=VLOOKUP(5,A1:C4,3,TRUE)", "#N/A"),  # below the first: #N/A
        ("=MATCH(45,A1:A4,1)", 4),
        ("=LOOKUP(35,A1:A4,C1:C4)", "c"),
        ("=MATCH(25,A1:A4)", 2),
    ]
    values = _check(tmp_path, cases, data)
    assert list(values.values()) == [expected for _, expected in cases]

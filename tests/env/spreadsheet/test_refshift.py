"""Deleting rows and columns rewrites references the way Excel does."""

from __future__ import annotations

import openpyxl
import pytest
from openpyxl.workbook.defined_name import DefinedName

from spreadrl.env.spreadsheet.refshift import shift_formula
from tests.env.spreadsheet.gym_helpers import call, make_ctx, value


def rows(formula, home="Sheet1", start=3, count=1, target="Sheet1"):
    return shift_formula(formula, home, target, "row", start, count)


def cols(formula, start=2, count=2):
    return shift_formula(formula, "Sheet1", "Sheet1", "col", start, count)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("=SUM(B2:B10)", "=SUM(B2:B9)"),  # a range losing a row shrinks
        ("=B4*2", "=B3*2"),  # below the deletion: moves up
        ("=$B$5+B$6", "=$B$4+B$5"),  # absolute markers stay
        ("=B1+B2", "=B1+B2"),  # above: unchanged
        ("=B3", "=#REF!"),  # the deleted cell itself
        ("=SUM(B3:C3)", "=SUM(#REF!)"),  # a range wholly deleted
        ("=SUM(B3:B6)", "=SUM(B3:B5)"),  # starting on the deleted row
        ("=SUM(B1:B3)", "=SUM(B1:B2)"),  # ending on it
        ("=SUM(2:5)", "=SUM(2:4)"),  # whole rows
        ("=SUM(A:A)", "=SUM(A:A)"),  # whole columns do not move under a row deletion
        ('=IF(B4>0,"B4",B5)', '=IF(B3>0,"B4",B4)'),  # text literals are not references
        ("=Total+B4", "=Total+B3"),  # a defined name is not a cell
        ("=Table1[Units]", "=Table1[Units]"),
        ("plain text", "plain text"),
    ],
)
def test_row_deletion_on_the_formulas_own_sheet(before, after):
    assert rows(before) == after


def test_references_from_other_sheets_follow_only_the_edited_sheet():
    assert rows("=Sheet1!B4+B4", home="Summary") == "=Sheet1!B3+B4"
    assert rows("='My Sheet'!B4", home="Summary", target="My Sheet") == "='My Sheet'!B3"
    assert rows("=sheet1!B4", home="Summary") == "=sheet1!B3"  # names are case-insensitive
    assert rows("=Other!B4", home="Summary") == "=Other!B4"
    assert rows("=B4", home=None) == "=B4"  # a defined name's unqualified refs are ambiguous


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("=SUM(A1:D1)", "=SUM(A1:B1)"),
        ("=D5", "=B5"),
        ("=C1", "=#REF!"),
        ("=SUM(B:C)", "=SUM(#REF!)"),
        ("=SUM(A:E)", "=SUM(A:C)"),
        ("=SUM(1:1)", "=SUM(1:1)"),
        ("=$E$2", "=$C$2"),
    ],
)
def test_column_deletion(before, after):
    assert cols(before) == after


def test_delete_rows_tool_keeps_totals_pointing_at_the_data(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for r, units in enumerate([10, 4, 7, 1, 3], start=2):
        ws.cell(r, 2, units)
    ws["B8"] = "=SUM(B2:B6)"
    ws["A10"] = "merged"
    ws.merge_cells("A10:C11")
    summary = wb.create_sheet("Summary")
    summary["A1"] = "=Sheet1!B8"
    summary["A2"] = "=SUM(Sheet1!B2:B6)/COUNT(Sheet1!B2:B6)"
    wb.defined_names["Units"] = DefinedName("Units", attr_text="Sheet1!$B$2:$B$6")
    book = tmp_path / "book.xlsx"
    wb.save(book)

    ctx = make_ctx(tmp_path, book=book)
    text = call(ctx, "delete_rows", start_row=3)  # the row holding 4
    assert "3 formulas pointing at moved cells were updated" in text
    assert value(ctx, "B7") == "=SUM(B2:B5)"
    assert value(ctx, "A1", "Summary") == "=Sheet1!B7"
    assert value(ctx, "A2", "Summary") == "=SUM(Sheet1!B2:B5)/COUNT(Sheet1!B2:B5)"
    assert ctx.book.wb.defined_names["Units"].attr_text == "Sheet1!$B$2:$B$5"
    assert [str(r) for r in ctx.book.wb["Sheet1"].merged_cells.ranges] == ["A9:C10"]
    assert value(ctx, "A9") == "merged"
    # the recalculated workbook agrees: 10 + 7 + 1 + 3
    out = call(ctx, "recalculate_and_read", ranges=["Sheet1!B7", "Summary!A1"])
    assert "B7: 21" in out and "A1: 21" in out


def test_delete_columns_tool_rewrites_formulas(tmp_path):
    ctx = make_ctx(tmp_path)  # Region, Units, Price in A:C
    call(ctx, "write_range", range="E2", values="=B2*C2")
    text = call(ctx, "delete_columns", start_column="A")
    assert "1 formula pointing at moved cells was updated" in text
    assert value(ctx, "D2") == "=A2*B2"

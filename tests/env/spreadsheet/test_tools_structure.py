"""manage_sheet, delete_rows and delete_columns."""

from __future__ import annotations

from tests.env.spreadsheet.gym_helpers import call, error_of, make_ctx, value


def test_manage_sheet_add_rename_copy_delete(tmp_path):
    ctx = make_ctx(tmp_path)
    assert call(ctx, "manage_sheet", action="add", sheet="Summary").startswith(
        "added sheet 'Summary'"
    )
    call(ctx, "manage_sheet", action="add", new_name="Extra")
    call(ctx, "manage_sheet", action="rename", sheet="extra", new_name="Extra 2")
    call(ctx, "manage_sheet", action="copy", sheet="Sheet1", new_name="Backup")
    assert ctx.book.wb["Backup"]["A2"].value == "North"
    text = call(ctx, "manage_sheet", action="delete", sheet="My Notes")
    assert text.endswith("sheets now: 'Sheet1', 'Summary', 'Extra 2', 'Backup'")


def test_manage_sheet_errors(tmp_path):
    ctx = make_ctx(tmp_path)
    assert "already exists" in error_of(ctx, "manage_sheet", action="add", sheet="sheet1")
    assert "not a valid sheet name" in error_of(ctx, "manage_sheet", action="add", sheet="a/b")
    assert "not a valid sheet name" in error_of(ctx, "manage_sheet", action="add", sheet="x" * 32)
    assert "needs a sheet name" in error_of(ctx, "manage_sheet", action="add")
    assert "does not exist" in error_of(ctx, "manage_sheet", action="delete", sheet="Nope")
    assert "pass sheet" in error_of(ctx, "manage_sheet", action="rename", new_name="X")
    assert "bad arguments" in error_of(ctx, "manage_sheet", action="move", sheet="Sheet1")
    call(ctx, "manage_sheet", action="delete", sheet="My Notes")
    assert "only sheet" in error_of(ctx, "manage_sheet", action="delete", sheet="Sheet1")


def test_delete_rows(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "delete_rows", start_row=2, count=2)
    assert text.startswith("deleted rows 2-3 of 'Sheet1'") and "4 rows x 3 columns" in text
    assert value(ctx, "A2") == "East" and value(ctx, "A4") == "North"
    call(ctx, "delete_rows", start_row="1", sheet="My Notes")
    assert value(ctx, "B1", "My Notes") == "Apple juice"
    assert "start_row must be 1 or more" in error_of(ctx, "delete_rows", start_row=0)
    assert "'start_row'" in error_of(ctx, "delete_rows", start_row="two")


def test_delete_columns_by_letter_or_number(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "delete_columns", start_column="b")
    assert value(ctx, "B1") == "Price"
    call(ctx, "delete_columns", start_column=1)
    assert value(ctx, "A1") == "Price"
    assert "not a column letter" in error_of(ctx, "delete_columns", start_column="B2")
    assert "count at least 1" in error_of(ctx, "delete_columns", start_column="A", count=0)
    assert "does not exist" in error_of(ctx, "delete_columns", start_column="A", sheet="Nope")

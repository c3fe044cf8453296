"""Structural tools: manage_sheet, delete_rows, delete_columns."""

from __future__ import annotations

import re
from typing import Literal

from openpyxl.utils.cell import column_index_from_string
from pydantic import Field

from spreadrl.env.spreadsheet.refshift import delete_and_shift
from spreadrl.env.spreadsheet.tools.base import Tool, ToolContext
from spreadrl.env.spreadsheet.tools.common import Args
from spreadrl.env.spreadsheet.workbook import (
    MAX_COLUMN,
    MAX_ROW,
    ToolError,
    WorkingCopy,
    column_letter,
)

_BAD_SHEET_CHARS = re.compile(r"[\[\]:*?/\\]")


class ManageSheetArgs(Args):
    action: Literal["add", "rename", "delete", "copy"] = Field(description="What to do.")
    sheet: str | None = Field(
        None, description="The sheet to act on (for add: the new sheet's name)."
    )
    new_name: str | None = Field(
        None, description="New name for rename/copy (and the name for add when sheet is absent)."
    )


def _valid_new_name(book: WorkingCopy, name: str | None, what: str) -> str:
    if name is None or not name.strip():
        raise ToolError(f"{what} needs a sheet name; pass new_name")
    if len(name) > 31 or _BAD_SHEET_CHARS.search(name) or name.startswith("'"):
        raise ToolError(
            f"{name!r} is not a valid sheet name (at most 31 characters, none of []:*?/\\)"
        )
    if any(n.lower() == name.lower() for n in book.wb.sheetnames):
        raise ToolError(f"a sheet named {name!r} already exists; choose another name")
    return name


def manage_sheet(ctx: ToolContext, args: ManageSheetArgs) -> str:
    action = "create" if args.action == "add" else args.action
    sheet = args.sheet
    if action == "create" and sheet is None:
        sheet = args.new_name
    if action != "create" and sheet is None:
        raise ToolError(f"{action} needs the sheet to act on; pass sheet")
    result = change_sheets(ctx.book, action, sheet, args.new_name)
    sheets = ", ".join(repr(n) for n in ctx.book.wb.sheetnames)
    return f"{result.replace('created', 'added', 1)}; sheets now: {sheets}"


SHEET_ACTIONS = ("create", "rename", "delete", "copy", "move", "hide", "unhide")


def change_sheets(
    book: WorkingCopy,
    action: str,
    sheet: str | None,
    new_name: str | None = None,
    index: int | None = None,
) -> str:
    """Create, rename, delete, copy, move, hide or unhide a sheet: both presets' manage_sheet.

    ``index`` is the 0-based final position for create/copy/move (required for
    move). The last visible sheet is never deleted or hidden. Returns a short
    summary of what changed.
    """
    wb = book.wb
    if action not in SHEET_ACTIONS:
        raise ToolError(f"unknown action {action!r}; use one of {', '.join(SHEET_ACTIONS)}")
    if index is not None and not 0 <= index < len(wb.sheetnames) + (action != "move"):
        raise ToolError(f"index {index} is out of range (0-{len(wb.sheetnames) - 1})")
    if action == "create":
        name = _valid_new_name(book, sheet, "create")
        ws = wb.create_sheet(name)
        result = f"created sheet {name!r}"
    else:
        if sheet is None:
            raise ToolError(f"{action} needs the sheet to act on")
        source = book.sheet_name(sheet)
        ws = wb[source]
        visible = [w for w in wb.worksheets if w.sheet_state == "visible"]
        if action == "rename":
            name = _valid_new_name(book, new_name, "rename")
            ws.title = name
            result = f"renamed sheet {source!r} to {name!r}"
        elif action == "delete":
            if len(wb.sheetnames) == 1:
                raise ToolError("cannot delete the only sheet; add another sheet first")
            if visible == [ws]:
                raise ToolError("cannot delete the last visible sheet")
            wb.remove(ws)
            if wb.active is None or wb.active.sheet_state != "visible":
                wb.active = wb.worksheets.index(
                    next(w for w in wb.worksheets if w.sheet_state == "visible")
                )
            result = f"deleted sheet {source!r}"
        elif action == "copy":
            name = _valid_new_name(book, new_name or f"{source} (2)", "copy")
            ws = wb.copy_worksheet(ws)
            ws.title = name
            result = f"copied sheet {source!r} to {name!r}"
        elif action == "move":
            if index is None:
                raise ToolError("move needs index, the sheet's 0-based final position")
            result = f"moved sheet {source!r} to position {index}"
        elif action == "hide":
            if visible == [ws]:
                raise ToolError("cannot hide the last visible sheet")
            ws.sheet_state = "hidden"
            if wb.active is ws:
                wb.active = wb.worksheets.index(
                    next(w for w in wb.worksheets if w.sheet_state == "visible")
                )
            result = f"hid sheet {source!r}"
        else:
            ws.sheet_state = "visible"
            result = f"unhid sheet {source!r}"
    if index is not None and action in ("create", "copy", "move"):
        wb.move_sheet(ws, offset=index - wb.worksheets.index(ws))
    book.touch()
    return result


class DeleteRowsArgs(Args):
    start_row: int = Field(description="First row to delete (1-based).")
    count: int = Field(1, description="How many rows to delete.")
    sheet: str | None = Field(None, description="Sheet name (default: first sheet).")


def delete_rows(ctx: ToolContext, args: DeleteRowsArgs) -> str:
    if not 1 <= args.start_row <= MAX_ROW or args.count < 1:
        raise ToolError("start_row must be 1 or more and count at least 1")
    ws = ctx.book.worksheet(args.sheet)
    changed = delete_and_shift(ctx.book.wb, ws, "row", args.start_row, args.count)
    ctx.book.touch()
    last = args.start_row + args.count - 1
    span = f"row {args.start_row}" if args.count == 1 else f"rows {args.start_row}-{last}"
    return (
        f"deleted {span} of {ws.title!r}; rows below moved up{_formulas_note(changed)}. "
        f"Used area now {ws.max_row} rows x {ws.max_column} columns"
    )


def _formulas_note(changed: int) -> str:
    if not changed:
        return ""
    if changed == 1:
        return "; 1 formula pointing at moved cells was updated"
    return f"; {changed} formulas pointing at moved cells were updated"


class DeleteColumnsArgs(Args):
    start_column: str | int = Field(
        description="First column to delete: a letter ('C') or 1-based number."
    )
    count: int = Field(1, description="How many columns to delete.")
    sheet: str | None = Field(None, description="Sheet name (default: first sheet).")


def delete_columns(ctx: ToolContext, args: DeleteColumnsArgs) -> str:
    start = args.start_column
    if isinstance(start, str):
        text = start.strip().upper()
        if text.isdigit():
            start = int(text)
        else:
            try:
                start = column_index_from_string(text)
            except ValueError:
                raise ToolError(
                    f"start_column {args.start_column!r} is not a column letter like 'C'"
                ) from None
    if not 1 <= start <= MAX_COLUMN or args.count < 1:
        raise ToolError("start_column must be a column (A-XFD or 1-16384) and count at least 1")
    ws = ctx.book.worksheet(args.sheet)
    changed = delete_and_shift(ctx.book.wb, ws, "col", start, args.count)
    ctx.book.touch()
    first, last = column_letter(start), column_letter(min(start + args.count - 1, MAX_COLUMN))
    span = f"column {first}" if args.count == 1 else f"columns {first}-{last}"
    return (
        f"deleted {span} of {ws.title!r}; columns to the right moved left"
        f"{_formulas_note(changed)}. Used area now {ws.max_row} rows x {ws.max_column} columns"
    )


TOOLS = [
    Tool(
        "manage_sheet",
        "Add, rename, delete or copy a sheet.",
        ManageSheetArgs,
        manage_sheet,
    ),
    Tool(
        "delete_rows",
        "Delete whole rows; the rows below move up.",
        DeleteRowsArgs,
        delete_rows,
    ),
    Tool(
        "delete_columns",
        "Delete whole columns; the columns to the right move left.",
        DeleteColumnsArgs,
        delete_columns,
    ),
]

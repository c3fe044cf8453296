"""The sheet and row/column tools of the spreadsheet-rl preset: manage_sheet, delete_rows/columns."""

from __future__ import annotations

import re
from typing import Any, Literal

from openpyxl.utils.cell import column_index_from_string
from openpyxl.workbook.workbook import Workbook

from spreadrl.env.spreadsheet.refshift import delete_and_shift
from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.srl.arguments import SrlArgs
from spreadrl.env.spreadsheet.tools.srl.replies import MAX_RESPONSE_CHARS, WORKBOOK, SrlError, fit
from spreadrl.env.spreadsheet.tools.structure import change_sheets
from spreadrl.env.spreadsheet.workbook import MAX_COLUMN, MAX_ROW, column_letter, split_reference

MAX_SHEETS = 200
MAX_DELETE_ROWS = 10_000
MAX_DELETE_COLUMNS = 1000


def _sheets_in_order(wb: Workbook) -> list[dict[str, Any]]:
    return [
        {"name": ws.title, "index": i, "state": ws.sheet_state}
        for i, ws in enumerate(wb.worksheets)
    ]


def manage_sheet(ctx: ToolContext, a: SrlArgs) -> str:
    if a.action in ("create", "copy") and len(ctx.book.wb.sheetnames) >= MAX_SHEETS:
        raise SrlError("too_many_sheets", f"a workbook here holds at most {MAX_SHEETS} sheets.")
    if a.action == "rename" and not a.new_name:
        raise SrlError("invalid_arguments", "rename needs new_name.")
    done = change_sheets(ctx.book, a.action, a.sheet_name, a.new_name, a.index)
    payload = {
        "status": "success",
        "action": a.action,
        "message": done,
        "sheets": _sheets_in_order(ctx.book.wb),
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ("sheets",))


_ROWS = re.compile(r"^\$?(\d+)(?::\$?(\d+))?$")
_COLUMNS = re.compile(r"^\$?([A-Za-z]{1,3})(?::\$?([A-Za-z]{1,3}))?$")


def _delete(ctx: ToolContext, a: SrlArgs, axis: Literal["row", "col"]) -> str:
    items = a.rows if axis == "row" else a.columns
    what, cap = ("rows", MAX_DELETE_ROWS) if axis == "row" else ("columns", MAX_DELETE_COLUMNS)
    if not items:
        raise SrlError("invalid_arguments", f"{what} is empty; pass a list like ['3', '7:9'].")
    spans: dict[str, list[tuple[int, int]]] = {}
    for item in items:
        named, ref = split_reference(item.strip()) if item.strip() else (None, "")
        match = (_ROWS if axis == "row" else _COLUMNS).match(ref.strip())
        if match is None:
            example = "'3' or '7:9'" if axis == "row" else "'B' or 'F:G'"
            raise SrlError("invalid_range", f"{item!r} is not a {what[:-1]} range like {example}")
        ends = [match.group(1), match.group(2) or match.group(1)]
        if axis == "row":
            first, last = sorted(int(e) for e in ends)
        else:
            first, last = sorted(column_index_from_string(e.upper()) for e in ends)
        if first < 1 or last > (MAX_ROW if axis == "row" else MAX_COLUMN):
            raise SrlError("invalid_range", f"{item!r} lies outside the sheet")
        if (
            named
            and a.sheet_name
            and ctx.book.sheet_name(named) != ctx.book.sheet_name(a.sheet_name)
        ):
            raise SrlError("sheet_mismatch", f"sheet_name does not match {item!r}")
        sheet = ctx.book.sheet_name(named or a.sheet_name)
        spans.setdefault(sheet, []).append((first, last))
    total = sum(last - first + 1 for ranges in spans.values() for first, last in ranges)
    if total > cap:
        raise SrlError("too_many", f"at most {cap} {what} per call; asked for {total}.")
    deleted: dict[str, list[str]] = {}
    changed = 0
    for sheet, ranges in spans.items():
        merged: list[list[int]] = []
        for first, last in sorted(ranges):
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        ws = ctx.book.wb[sheet]
        for first, last in reversed(merged):  # bottom-up: earlier numbers stay valid
            changed += delete_and_shift(ctx.book.wb, ws, axis, first, last - first + 1)
        label = str if axis == "row" else column_letter
        deleted[sheet] = [
            label(f) if f == last else f"{label(f)}:{label(last)}" for f, last in merged
        ]
    ctx.book.touch()
    payload = {
        "status": "success",
        "file": WORKBOOK,
        f"deleted_{what}": deleted,
        f"deleted_{what}_count": total,
        "formulas_updated": changed,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ())


def delete_rows(ctx: ToolContext, a: SrlArgs) -> str:
    return _delete(ctx, a, "row")


def delete_columns(ctx: ToolContext, a: SrlArgs) -> str:
    return _delete(ctx, a, "col")

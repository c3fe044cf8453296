"""The writing tools of the spreadsheet-rl preset: write_range, format_range, fill_formula, clear_range."""

from __future__ import annotations

import pickle
import re

from openpyxl.formula.tokenizer import Tokenizer
from openpyxl.utils.cell import column_index_from_string

from spreadrl.data.jsontypes import JSONValue
from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.edit import (
    FORMAT_OPTIONS,
    apply_format,
    clear_cells,
    fill_cells,
    write_values,
)
from spreadrl.env.spreadsheet.tools.srl.address import computed_values, qualify
from spreadrl.env.spreadsheet.tools.srl.arguments import SrlArgs
from spreadrl.env.spreadsheet.tools.srl.replies import (
    MAX_RESPONSE_CHARS,
    WORKBOOK,
    SrlError,
    fit,
    jsonable,
)
from spreadrl.env.spreadsheet.tools.structure import change_sheets
from spreadrl.env.spreadsheet.workbook import (
    MAX_COLUMN,
    MAX_ROW,
    CellRange,
    column_letter,
    split_reference,
)

MAX_CELL_CHARS = 8192
MAX_TEMPLATE_CHARS = 8192


def _static(value: JSONValue, where: str) -> JSONValue:
    """A value upstream's write_range accepts: formulas refused, a leading apostrophe means text."""
    if isinstance(value, str):
        if len(value) > MAX_CELL_CHARS:
            raise SrlError(
                "cell_too_long", f"{where}: text over {MAX_CELL_CHARS} characters is refused."
            )
        if value.startswith("'"):
            return value[1:]
        if value.startswith("="):
            raise SrlError(
                "formula_rejected",
                f"write_range writes static values; {where} holds the formula {value[:40]!r}. "
                "Use fill_formula for formulas, or start the text with an apostrophe.",
            )
    return value


def write_range(ctx: ToolContext, a: SrlArgs) -> str:
    data = a.data
    if isinstance(data, list):
        data = [
            [_static(v, "data") for v in row] if isinstance(row, list) else _static(row, "data")
            for row in data
        ]
    else:
        data = _static(data, "data")
    text = a.range if isinstance(a.range, str) else ""
    named, _ = split_reference(text) if text.strip() else (None, "")
    sheet = named or a.sheet_name
    created = False
    if (
        sheet
        and sheet not in ctx.book.wb.sheetnames
        and not any(n.lower() == sheet.strip().lower() for n in ctx.book.wb.sheetnames)
    ):
        change_sheets(ctx.book, "create", sheet)
        created = True
    target = ctx.book.parse_range(qualify(ctx, a.range, a.sheet_name))
    done = write_values(ctx, target, data, literal_text=True)
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "range": done["range"],
        "written_cells": done["values"],
        "cleared_cells": done["cleared"],
        "skipped_cells": done["skipped"],
        "created_sheet": created,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ())


def format_range(ctx: ToolContext, a: SrlArgs) -> str:
    options = {k: getattr(a, k) for k in FORMAT_OPTIONS if getattr(a, k) is not None}
    if not options:
        raise SrlError("no_format_options", "no formatting option given.")
    target = ctx.book.parse_range(qualify(ctx, a.range, a.sheet_name))
    apply_format(ctx, target, options, color_names=True)
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "range": target.a1(),
        "cells": target.size,
        "applied": options,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ())


_WRAPPED_FORMULA = re.compile(r'^=\s*"\s*=')


def fill_formula(ctx: ToolContext, a: SrlArgs) -> str:
    template = a.formula_template.strip() if isinstance(a.formula_template, str) else ""
    if not template.startswith("="):
        raise SrlError("invalid_formula", "formula_template must begin with =.")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise SrlError("invalid_formula", f"formula_template is over {MAX_TEMPLATE_CHARS} chars.")
    if _WRAPPED_FORMULA.match(template):
        raise SrlError(
            "invalid_formula", "the formula is wrapped in quotes as text; write it bare: =SUM(...)"
        )
    try:
        Tokenizer(template)
    except Exception as exc:  # openpyxl's tokenizer raises plain errors for bad formulas
        raise SrlError("invalid_formula", f"invalid formula: {exc}") from None
    start = ctx.book.parse_range(qualify(ctx, a.start_cell, a.sheet_name, "start_cell"))
    if start.size != 1:
        raise SrlError("invalid_range", f"start_cell must be one cell, got {start.a1()}")
    end_row = start.min_row if a.end_row is None else a.end_row
    try:
        end_col = start.min_col if not a.end_col else column_index_from_string(a.end_col.upper())
    except ValueError:
        raise SrlError("invalid_range", f"end_col {a.end_col!r} is not a column letter") from None
    if not start.min_row <= end_row <= MAX_ROW or not start.min_col <= end_col <= MAX_COLUMN:
        raise SrlError(
            "invalid_range", "end_row and end_col must be at or after start_cell's row and column"
        )
    target = CellRange(start.sheet, start.min_row, start.min_col, end_row, end_col)
    origin = f"{column_letter(start.min_col)}{start.min_row}"
    book = ctx.book
    snapshot = pickle.dumps(book.wb, protocol=pickle.HIGHEST_PROTOCOL)
    plan = fill_cells(ctx, template, origin, target, skip_merged=True)
    values = computed_values(ctx)
    bad = None
    if values is not None:
        sheet_values = values.get(target.sheet, {})
        bad = next((f for r, c, f in plan if sheet_values.get((r, c)) == "#NAME?"), None)
    if values is None or bad is not None:
        book.wb = pickle.loads(snapshot)  # rollback: the workbook as it was before the call
        book.touch()
        if values is None:
            raise SrlError(
                "recalc_failed", "the workbook could not be recalculated; it is unchanged."
            )
        raise SrlError(
            "invalid_formula",
            f"{bad} evaluates to #NAME? (an unknown function or name); the workbook is unchanged.",
        )
    picks = plan if len(plan) <= 4 else [*plan[:3], plan[-1]]
    sheet_values = values.get(target.sheet, {})
    samples = [
        {
            "address": f"{column_letter(c)}{r}",
            "formula": f,
            "value": jsonable(sheet_values.get((r, c))),
        }
        for r, c, f in picks
    ]
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "range": target.a1(),
        "filled_cells": len(plan),
        "skipped_merged_cells": target.size - len(plan),
        "recalculated": True,
        "samples": samples,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ("samples",))


def clear_range(ctx: ToolContext, a: SrlArgs) -> str:
    target = ctx.book.parse_range(qualify(ctx, a.range, a.sheet_name), clip=True)
    changed = clear_cells(ctx, target)
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "range": target.a1(),
        "changed_cells": changed,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ())

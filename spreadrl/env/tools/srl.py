"""The ``spreadsheet-rl`` tool preset: Spreadsheet-RL's tool contracts as a view of the gym's tools.

Spreadsheet-RL-4B was trained on the twelve tools of its repository's
``configs/tool/spreadsheet_tools.yaml``: the same names as this gym's, other
arguments (an optional ``path`` and ``sheet_name``, ``data``, ``start_cell`` /
``end_row`` / ``end_col`` / ``formula_template``, row lists like
``['3', '7:9']``) and compact JSON replies capped at 4,096 characters (10,240
for ``inspect_range``). This module is that view and nothing more: each tool
checks its upstream-shaped arguments, calls the behaviour the gym's own tools
use (:func:`~spreadrl.env.tools.edit.write_values`,
:func:`~spreadrl.env.tools.edit.fill_cells`,
:func:`~spreadrl.env.tools.structure.change_sheets`,
:func:`~spreadrl.env.refshift.delete_and_shift`,
:func:`~spreadrl.env.tools.compute.run_code`, ...) and answers in upstream's
shape. The argument schemas are written out (:data:`SCHEMAS`), their facts
(names, types, enums, required) equal upstream's yaml
(``tests/env/test_tools_srl.py``); the descriptions are this project's words.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import pickle
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Optional, TypeAlias

from openpyxl.formula.tokenizer import Tokenizer
from openpyxl.utils.cell import column_index_from_string
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.cell_range import CellRange as OpenpyxlRange
from openpyxl.worksheet.worksheet import Worksheet
from pydantic import BaseModel, ConfigDict, Field, create_model

from spreadrl.data.jsontypes import JSONScalar, JSONValue
from spreadrl.env.refshift import delete_and_shift
from spreadrl.env.tools.base import Tool, ToolContext
from spreadrl.env.tools.common import ReplyError, nonempty_cells
from spreadrl.env.tools.compute import EXCEL_ERRORS, _evaluated, run_code
from spreadrl.env.tools.edit import (
    FORMAT_OPTIONS,
    apply_format,
    clear_cells,
    fill_cells,
    write_values,
)
from spreadrl.env.tools.structure import change_sheets
from spreadrl.env.workbook import (
    MAX_COLUMN,
    MAX_ROW,
    CellRange,
    ToolError,
    column_letter,
    quote_sheet,
    render_value,
    split_reference,
)
from spreadrl.errors import ConfigError

MAX_RESPONSE_CHARS = 4096
INSPECT_RESPONSE_CHARS = 10240
INSPECT_MAX_CELLS = 400  # records per range in cells mode
SUMMARY_MAX_CELLS = 100_000
MAX_RANGES = 20
MAX_SHEETS = 200
MAX_CELL_CHARS = 8192
MAX_TEMPLATE_CHARS = 8192
MAX_DELETE_ROWS = 10_000
MAX_DELETE_COLUMNS = 1000
FIND_DEFAULT_RESULTS = 20
RECALC_MATRIX_CELLS = 100  # ranges up to this size come back as a matrix, larger as samples
RECALC_SAMPLES = 50
WORKBOOK = "data.xlsx"  # the one workbook of an episode, as upstream names it
CODE_WORKBOOK = "data/data.xlsx"  # where the code interpreter finds it
_VALUE_CHARS = 200

_PATH = {"type": "string", "description": "Workbook file, relative; omit it for data.xlsx."}


def _sheet(what: str) -> dict[str, Any]:
    return {"type": "string", "description": what}


_SHEET_FOR_RANGE = _sheet(
    "Sheet of an unqualified range (omit it when the range names its sheet); default: first sheet."
)

# (name, description, properties, required): upstream's facts, this project's descriptions
_SPECS: list[tuple[str, str, dict[str, dict[str, Any]], list[str]]] = [
    (
        "inspect_range",
        "Read A1 ranges. mode=cells lists each non-empty cell with its value and formula; "
        "mode=summary counts contents without listing values.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {
                "type": "string",
                "description": "An A1 range, or up to 20 separated by commas. cells mode lists up "
                "to 400 cells per range and says where to continue (omitted_from) when cut; "
                "summary mode scans up to 100000 cells per call.",
            },
            "include_details": {
                "type": "boolean",
                "description": "cells mode only: add number formats, styles and merged ranges. "
                "Default false.",
            },
            "mode": {
                "type": "string",
                "enum": ["cells", "summary"],
                "description": "cells (default): address/value/formula records; summary: counts "
                "of non-empty, empty, formula and error cells and the non-empty fraction.",
            },
        },
        ["range"],
    ),
    (
        "list_sheets",
        "List the sheets: name, position, visibility, whether active, used dimensions. Needed "
        "only when the sheets are unknown or after changing them.",
        {"path": _PATH},
        [],
    ),
    (
        "manage_sheet",
        "Create, rename, delete, copy, move, hide or unhide a sheet; index is the 0-based final "
        "position for create/copy/move. The last visible sheet cannot be deleted or hidden; a "
        "rename does not rewrite formulas. Answers with the sheets in order.",
        {
            "path": _PATH,
            "action": {
                "type": "string",
                "enum": ["create", "rename", "delete", "copy", "move", "hide", "unhide"],
            },
            "sheet_name": _sheet("The sheet to act on; for create, the new sheet's name."),
            "new_name": _sheet("New name: required for rename, optional for copy."),
            "index": {
                "type": "integer",
                "description": "0-based final position for create/copy/move; move needs it.",
            },
        },
        ["action", "sheet_name"],
    ),
    (
        "find_cells",
        "Search cell values and/or formulas for text; answers with the matching addresses "
        "(matches_csv), and the matched text with include_values.",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet to search (omit it when range names its sheet); default: every sheet."
            ),
            "query": {
                "type": "string",
                "description": "Text, or a simple regex (no groups, |, +, ? or {m,n}); it cannot "
                "find blank cells: inspect the range for those.",
            },
            "match": {
                "type": "string",
                "enum": ["contains", "equals", "prefix", "regex"],
                "description": "How the query matches. Default contains.",
            },
            "search_in": {
                "type": "string",
                "enum": ["values", "formulas", "both"],
                "description": "Where to look. Default values.",
            },
            "case_sensitive": {"type": "boolean", "description": "Default false."},
            "include_values": {
                "type": "boolean",
                "description": "Also return the matched values/formulas. Default false.",
            },
            "return": {
                "type": "string",
                "enum": ["first", "all"],
                "description": "The first match or all of them. Default first.",
            },
            "max_results": {
                "type": "integer",
                "description": "Most matches returned with return=all. Default 20.",
            },
            "range": {
                "type": "string",
                "description": "A1 range to search; default: each sheet's used area.",
            },
        },
        ["query"],
    ),
    (
        "write_range",
        "Write static values (a formula string is refused: use fill_formula). A one-cell range "
        "is the top-left corner of the data; a scalar, a row or a column repeats over the range. "
        "A missing sheet is created. Formulas that depend on the cells are recalculated later.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {"type": "string", "description": "Target cell or rectangle, A1."},
            "data": {
                "type": ["array", "string", "number", "boolean"],
                "description": "A scalar, one row, or a list of rows matching the rectangle (or "
                "starting at a single cell). null leaves a cell, an empty string clears it, a "
                "leading apostrophe keeps text as text.",
            },
        },
        ["range", "data"],
    ),
    (
        "format_range",
        "Format the cells, rows and columns of an A1 range; answers with what was applied. "
        "Unknown options are refused.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {"type": "string", "description": "A1 range."},
            "fill_color": {
                "type": "string",
                "description": "Background colour: #RRGGBB, RRGGBB, AARRGGBB or a name (red).",
            },
            "font_color": {
                "type": "string",
                "description": "Font colour: #RRGGBB, RRGGBB, AARRGGBB or a name (red).",
            },
            "bold": {"type": "boolean", "description": "Bold on or off."},
            "italic": {"type": "boolean", "description": "Italic on or off."},
            "underline": {"type": "boolean", "description": "Single underline on or off."},
            "number_format": {
                "type": "string",
                "description": "Excel number format, e.g. 0.00% or yyyy-mm-dd.",
            },
            "horizontal_alignment": {
                "type": "string",
                "enum": [
                    "general",
                    "left",
                    "center",
                    "right",
                    "fill",
                    "justify",
                    "centerContinuous",
                    "distributed",
                ],
            },
            "vertical_alignment": {
                "type": "string",
                "enum": ["top", "center", "bottom", "justify", "distributed"],
            },
            "wrap_text": {"type": "boolean", "description": "Wrap text on or off."},
            "shrink_to_fit": {"type": "boolean", "description": "Shrink text to the cell width."},
            "text_rotation": {
                "type": "integer",
                "description": "Rotation 0-180 degrees, or 255 for stacked text.",
            },
            "border_style": {
                "type": "string",
                "description": "Border on all sides: thin, medium, thick, dashed, dotted, ...",
            },
            "border_color": {
                "type": "string",
                "description": "Border colour (hex or name); thin borders unless border_style.",
            },
            "row_height": {
                "type": "number",
                "description": "Height of the rows the range touches.",
            },
            "column_width": {
                "type": "number",
                "description": "Width of the columns the range touches.",
            },
        },
        ["range"],
    ),
    (
        "fill_formula",
        "Fill one formula over a rectangle, relative references moving row by row and column "
        "by column; for formulas only. A bad formula is refused. The workbook is recalculated "
        "before the change is kept, and a failure leaves it unchanged, so no recalculation is "
        "needed afterwards. Merged placeholders are skipped; answers with samples.",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet of an unqualified start_cell (omit it when start_cell names its sheet); "
                "default: first sheet."
            ),
            "start_cell": {
                "type": "string",
                "description": "First cell, A1 (D2 or Sheet1!D2); the formula is written for it.",
            },
            "end_row": {
                "type": "integer",
                "description": "Last row to fill (inclusive); default: start_cell's row.",
            },
            "end_col": {
                "type": "string",
                "description": "Last column to fill (inclusive), a letter like H; default: "
                "start_cell's column.",
            },
            "formula_template": {
                "type": "string",
                "description": "The formula for start_cell, beginning with = (not a formula "
                "wrapped in quotes). Other sheets as 'Sheet Name'!$A$1.",
            },
        },
        ["start_cell", "formula_template"],
    ),
    (
        "clear_range",
        "Empty values and formulas without moving cells (delete_rows/delete_columns move them). "
        "Takes a cell, a rectangle, whole rows or whole columns; answers with how many cells "
        "changed.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {
                "type": "string",
                "description": "A1 cell, rectangle, rows (2:5) or columns.",
            },
        },
        ["range"],
    ),
    (
        "delete_rows",
        "Delete rows; the rows below move up and formulas follow them (clear_range empties "
        "without moving).",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet of unqualified rows (omit it when they name their sheet); default: first "
                "sheet."
            ),
            "rows": {
                "type": "array",
                "description": "Rows to delete, e.g. ['2:3'], ['3', '5', '7:9'] or "
                "['Sheet1!5:10']; one range is a one-item list.",
                "items": {"type": "string"},
            },
        },
        ["rows"],
    ),
    (
        "delete_columns",
        "Delete columns; the columns to the right move left and formulas follow them "
        "(clear_range empties without moving).",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet of unqualified columns (omit it when they name their sheet); default: "
                "first sheet."
            ),
            "columns": {
                "type": "array",
                "description": "Columns to delete, e.g. ['B:D'], ['B', 'D', 'F:G'] or "
                "['Sheet1!A:C']; one range is a one-item list.",
                "items": {"type": "string"},
            },
        },
        ["columns"],
    ),
    (
        "recalculate_and_read",
        "Recalculate the workbook and read ranges: small ranges as a matrix, large ones as "
        "addressed samples.",
        {
            "path": _PATH,
            "cell_ranges": {
                "type": "array",
                "description": "A1 ranges to read after recalculating.",
                "items": {"type": "string"},
            },
        },
        ["cell_ranges"],
    ),
    (
        "code_interpreter",
        "Run Python (a fresh process each call); the workbook is data/data.xlsx.",
        {"code": {"type": "string", "description": "The Python source to run."}},
        ["code"],
    ),
]

SCHEMAS: dict[str, dict[str, Any]] = {
    name: {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }
    for name, description, props, required in _SPECS
}
STRICT = frozenset({"format_range"})  # upstream refuses unknown parameters only here

SrlArgs: TypeAlias = BaseModel
"""A call's validated arguments: an instance of the model :func:`_args_model` builds from
the tool's upstream schema (one model per tool, made at import); the tools read its
fields (the schema's properties) as attributes."""


def _python_type(prop: dict[str, Any]) -> object:
    """The annotation (a runtime type form) a schema property becomes in the args model."""
    kind = prop.get("type")
    if "enum" in prop:
        return Literal[tuple(prop["enum"])]
    if kind == "array" and prop.get("items", {}).get("type") == "string":
        return list[str]
    if not isinstance(kind, str):  # a type list (write_range's data): checked by the tool
        return Any
    return {"string": str, "integer": int, "boolean": bool, "number": float}.get(kind, Any)


def _args_model(name: str) -> type[BaseModel]:
    """The pydantic model that validates ``name``'s arguments, built from its schema (one source)."""
    params = SCHEMAS[name]["function"]["parameters"]
    fields: dict[str, Any] = {}
    for prop, spec in params["properties"].items():
        kind = _python_type(spec)
        required = prop in params["required"]
        default = Field(... if required else None, alias=prop)
        fields[prop + "_" if prop == "return" else prop] = (
            kind if required else Optional[kind],  # noqa: UP045 (a runtime type, not a hint)
            default,
        )
    extra = "forbid" if name in STRICT else "ignore"
    config = ConfigDict(extra=extra, populate_by_name=True)
    return create_model(f"{name}_srl_args", __config__=config, **fields)


# ---- replies -----------------------------------------------------------------------------------
class SrlError(ToolError):
    """A refused call, with upstream's error code (``invalid_path``, ``sheet_not_found``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def dumps(payload: object) -> str:
    """Compact JSON, as upstream's tools answer (no spaces, non-ASCII kept)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def error_reply(code: str, message: str) -> str:
    return dumps({"status": "error", "error": code, "message": message, "truncated": False})


def fit(payload: dict[str, Any], cap: int, lists: tuple[str, ...]) -> str:
    """``payload`` as JSON within ``cap`` characters, cutting the lists named in ``lists``.

    The longest list is cut first (keeping its head), binary-searched to the most
    items that fit, and the payload says so (``truncated``, ``response_truncated``).
    """
    text = dumps(payload)
    if len(text) <= cap:
        return text
    payload["truncated"] = True
    payload["response_truncated"] = True
    holders = _list_holders(payload, lists)
    for holder, key in sorted(holders, key=lambda h: -len(dumps(h[0][h[1]]))):
        items = holder[key]
        lo, hi = 0, len(items)
        while lo < hi:  # the most items that fit
            mid = (lo + hi + 1) // 2
            holder[key] = items[:mid]
            if len(dumps(payload)) <= cap:
                lo = mid
            else:
                hi = mid - 1
        holder[key] = items[:lo]
        if lo < len(items):
            holder.setdefault("omitted", len(items) - lo)
        text = dumps(payload)
        if len(text) <= cap:
            return text
    return dumps({"status": payload.get("status", "success"), "truncated": True})


def _list_holders(payload: object, keys: tuple[str, ...]) -> list[tuple[dict[str, Any], str]]:
    found: list[tuple[dict[str, Any], str]] = []
    if isinstance(payload, dict):
        for key, value in payload.items():
            if key in keys and isinstance(value, list | str):
                found.append((payload, key))
            elif isinstance(value, list | dict):
                found.extend(_list_holders(value, keys))
    elif isinstance(payload, list):
        for item in payload:
            found.extend(_list_holders(item, keys))
    return found


def jsonable(value: object) -> JSONScalar:
    """A cell value as JSON: numbers and booleans as they are, dates ISO, long text cut."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    text = str(getattr(value, "text", value))
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


# ---- the workbook path, sheets, ranges ---------------------------------------------------------
def check_path(ctx: ToolContext, path: object) -> None:
    """Accept ``path`` only when it names the episode's workbook; hostile input is refused.

    Absolute paths, ``..``, NUL bytes and non-.xlsx names are ``invalid_path``;
    a relative name is looked up inside the episode folder only (``data/`` may
    prefix it, as upstream allows), never following links out of it.
    """
    if path is None or (isinstance(path, str) and not path.strip()):
        return
    if not isinstance(path, str) or "\0" in path or "\\" in path:
        raise SrlError("invalid_path", "invalid path.")
    rel = PurePosixPath(path.strip())
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise SrlError("invalid_path", "invalid path.")
    if rel.suffix.lower() != ".xlsx":
        raise SrlError("invalid_path", "only .xlsx workbooks are supported.")
    if rel.parts[0] == "data" and len(rel.parts) > 1:
        rel = PurePosixPath(*rel.parts[1:])
    if str(rel) == WORKBOOK:
        return
    folder = ctx.folder.resolve()
    candidate = ctx.folder / str(rel)
    try:
        inside = candidate.resolve(strict=True).is_relative_to(folder)
    except (OSError, RuntimeError):
        inside = False
    if inside and candidate.is_file() and not candidate.is_symlink():
        raise SrlError(
            "unsupported_path",
            f"{path} is not this episode's workbook; these tools edit data.xlsx only "
            "(code_interpreter can read other files)",
        )
    raise SrlError("file_not_found", f"file not found: {path}")


def qualify(ctx: ToolContext, text: object, sheet_name: str | None, what: str = "range") -> str:
    """``text`` with its sheet: the one it names, else ``sheet_name``, else the first sheet."""
    if not isinstance(text, str) or not text.strip():
        raise SrlError("invalid_range", f"{what} must be an A1 string like B2 or Sheet1!A1:C3")
    text = text.strip()
    named, _ = split_reference(text)
    if named is not None:
        if sheet_name and ctx.book.sheet_name(sheet_name) != ctx.book.sheet_name(named):
            raise SrlError(
                "sheet_mismatch",
                f"sheet_name {sheet_name!r} does not match {what} sheet {named!r}.",
            )
        return text
    sheet = ctx.book.sheet_name(sheet_name) if sheet_name else ctx.book.wb.sheetnames[0]
    return f"{quote_sheet(sheet)}!{text}"


def split_ranges(text: str) -> list[str]:
    """``"A1:B2, 'My, sheet'!C3"`` -> its ranges (commas inside quoted sheet names kept)."""
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    if any(not p for p in parts):
        raise SrlError("invalid_range", "empty range in the comma-separated list")
    return parts


def _address(sheet: str, row: int, col: int) -> str:
    return f"{quote_sheet(sheet)}!{column_letter(col)}{row}"


def _computed(ctx: ToolContext) -> dict[str, dict[tuple[int, int], Any]] | None:
    """Recalculated values of the working copy, None when the engine cannot compute them."""
    try:
        return _evaluated(ctx)
    except ToolError:
        return None


def _is_formula(value: object) -> bool:
    return isinstance(value, str) and value.startswith("=")


# ---- the tools ---------------------------------------------------------------------------------
def inspect_range(ctx: ToolContext, a: SrlArgs) -> str:
    mode = a.mode or "cells"
    if mode == "summary" and a.include_details:
        raise SrlError("invalid_arguments", "include_details is incompatible with mode=summary.")
    texts = split_ranges(a.range) if isinstance(a.range, str) else []
    if len(texts) > MAX_RANGES:
        raise SrlError("too_many_ranges", f"at most {MAX_RANGES} ranges per call.")
    targets = [ctx.book.parse_range(qualify(ctx, t, a.sheet_name), clip=True) for t in texts]
    if mode == "summary":
        scanned = sum(t.size for t in targets)
        if scanned > SUMMARY_MAX_CELLS:
            raise SrlError(
                "summary_range_too_large",
                f"summary scans at most {SUMMARY_MAX_CELLS} cells per call; these ranges hold "
                f"{scanned}",
            )
        return fit(
            {"status": "success", "file": WORKBOOK, "mode": "summary", "ranges": [
                _summary(ctx, t) for t in targets
            ], "truncated": False},
            INSPECT_RESPONSE_CHARS,
            (),
        )  # fmt: skip
    computed = None
    blocks = []
    for target in targets:
        ws = ctx.book.wb[target.sheet]
        cells = nonempty_cells(ws, target)
        if computed is None and any(_is_formula(v) for _, _, v in cells):
            computed = _computed(ctx) or {}
        sheet_values = (computed or {}).get(target.sheet, {})
        records = []
        for r, c, value in cells[:INSPECT_MAX_CELLS]:
            record: dict[str, Any] = {"address": f"{column_letter(c)}{r}"}
            if _is_formula(value):
                record["value"] = jsonable(sheet_values.get((r, c)))
                record["formula"] = value
            else:
                record["value"] = jsonable(value)
            if a.include_details:
                record.update(_details(ws, r, c))
            records.append(record)
        block: dict[str, Any] = {
            "range": target.a1(),
            "non_empty_cells": len(cells),
            "cells": records,
        }
        if a.include_details:
            merged = [str(m) for m in ws.merged_cells.ranges if _overlaps(m, target)]
            if merged:
                block["merged_ranges"] = merged
        if len(cells) > len(records):
            block["omitted_cells"] = len(cells) - len(records)
            r, c, _ = cells[len(records)]
            block["omitted_from"] = f"{column_letter(c)}{r}"
        blocks.append(block)
    payload = {"status": "success", "file": WORKBOOK, "mode": "cells", "ranges": blocks}
    payload["truncated"] = any("omitted_from" in b for b in blocks)
    text = dumps(payload)
    if len(text) <= INSPECT_RESPONSE_CHARS:
        return text
    return _fit_cells(payload, blocks)


def _fit_cells(payload: dict[str, Any], blocks: list[dict[str, Any]]) -> str:
    """Cut the records of the last ranges first, and say where each cut range continues."""
    payload["truncated"] = payload["response_truncated"] = True
    for block in reversed(blocks):
        records = block["cells"]
        lo, hi = 0, len(records)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            block["cells"] = records[:mid]
            if len(dumps(payload)) <= INSPECT_RESPONSE_CHARS:
                lo = mid
            else:
                hi = mid - 1
        block["cells"] = records[:lo]
        if lo < len(records):
            block["omitted_cells"] = block["non_empty_cells"] - lo
            block["omitted_from"] = records[lo]["address"]
        if len(dumps(payload)) <= INSPECT_RESPONSE_CHARS:
            return dumps(payload)
    return dumps({"status": "success", "truncated": True, "response_truncated": True})


def _overlaps(merged: OpenpyxlRange, target: CellRange) -> bool:
    return not (
        merged.max_row < target.min_row
        or merged.min_row > target.max_row
        or merged.max_col < target.min_col
        or merged.min_col > target.max_col
    )


def _details(ws: Worksheet, row: int, col: int) -> dict[str, Any]:
    cell = ws.cell(row, col)
    out: dict[str, Any] = {}
    if cell.number_format and cell.number_format != "General":
        out["number_format"] = cell.number_format
    style = {}
    if cell.font is not None:
        if cell.font.b:
            style["bold"] = True
        if cell.font.i:
            style["italic"] = True
        if cell.font.u:
            style["underline"] = True
    fill = getattr(cell.fill, "fgColor", None)
    if getattr(cell.fill, "fill_type", None) and isinstance(getattr(fill, "rgb", None), str):
        style["fill_color"] = fill.rgb
    if cell.alignment is not None and cell.alignment.horizontal:
        style["horizontal_alignment"] = cell.alignment.horizontal
    if style:
        out["style"] = style
    return out


def _summary(ctx: ToolContext, target: CellRange) -> dict[str, Any]:
    cells = nonempty_cells(ctx.book.wb[target.sheet], target)
    formulas = [(r, c) for r, c, v in cells if _is_formula(v)]
    errors = sum(1 for _, _, v in cells if isinstance(v, str) and v in EXCEL_ERRORS)
    if formulas:
        values = (_computed(ctx) or {}).get(target.sheet, {})
        errors += sum(1 for rc in formulas if values.get(rc) in EXCEL_ERRORS)
    return {
        "range": target.a1(),
        "cells": target.size,
        "non_empty": len(cells),
        "empty": target.size - len(cells),
        "formulas": len(formulas),
        "errors": errors,
        "non_empty_fraction": round(len(cells) / target.size, 4),
    }


def list_sheets(ctx: ToolContext, a: SrlArgs) -> str:
    wb = ctx.book.wb
    active = wb.worksheets.index(wb.active) if wb.active in wb.worksheets else None
    sheets = []
    for i, ws in enumerate(wb.worksheets):
        rows, cols = ctx.book.dimensions(ws.title)
        sheets.append({
            "name": ws.title,
            "index": i,
            "dimensions": f"A1:{column_letter(max(cols, 1))}{max(rows, 1)}",
            "max_row": max(rows, 1),
            "max_col": max(cols, 1),
            "state": ws.sheet_state,
            "hidden": ws.sheet_state != "visible",
            "active": i == active,
        })  # fmt: skip
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "active_sheet": wb.worksheets[active].title if active is not None else None,
        "active_index": active,
        "sheet_count": len(sheets),
        "returned_sheets": len(sheets),
        "truncated": False,
        "sheets": sheets,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ("sheets",))


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


_UNSUPPORTED_REGEX = re.compile(r"(?<!\\)[()|+?]|(?<!\\)\{\d*,?\d*\}")


def find_cells(ctx: ToolContext, a: SrlArgs) -> str:
    query = a.query
    if not query:
        raise SrlError("invalid_query", "query is empty; it cannot find blank cells.")
    match, search_in = a.match or "contains", a.search_in or "values"
    flags = 0 if a.case_sensitive else re.IGNORECASE
    if match == "regex":
        if _UNSUPPORTED_REGEX.search(query):
            raise SrlError(
                "unsupported_regex", "regex may not use groups, alternation, +, ? or {m,n}."
            )
        try:
            pattern = re.compile(query, flags)
        except re.error as exc:
            raise SrlError("invalid_regex", f"invalid regex: {exc}") from None
    else:
        escaped = re.escape(query)
        body = {"contains": escaped, "equals": f"^{escaped}$", "prefix": f"^{escaped}"}[match]
        pattern = re.compile(body, flags | re.DOTALL)
    everything = (a.return_ or "first") == "all"
    limit = a.max_results if a.max_results is not None else FIND_DEFAULT_RESULTS
    if everything and not 1 <= limit <= ctx.config.max_find_results:
        raise SrlError("invalid_arguments", f"max_results must be 1-{ctx.config.max_find_results}.")
    limit = limit if everything else 1
    book = ctx.book
    if a.range:
        targets = [book.parse_range(qualify(ctx, a.range, a.sheet_name), clip=True)]
    else:
        names = [book.sheet_name(a.sheet_name)] if a.sheet_name else book.wb.sheetnames
        targets = [book.parse_range(f"{quote_sheet(n)}!A1:XFD{MAX_ROW}", clip=True) for n in names]
    computed: dict[str, Any] | None = None
    matches: list[dict[str, Any]] = []
    total = 0
    for target in targets:
        for r, c, raw in nonempty_cells(book.wb[target.sheet], target):
            formula = raw if _is_formula(raw) else None
            value = raw
            if formula is not None and search_in != "formulas":
                if computed is None:
                    computed = _computed(ctx) or {}
                value = computed.get(target.sheet, {}).get((r, c))
            texts = []
            if search_in in ("values", "both") and value is not None:
                texts.append(value if isinstance(value, str) else render_value(value))
            if search_in in ("formulas", "both") and formula is not None:
                texts.append(formula)
            if not any(pattern.search(t) for t in texts):
                continue
            total += 1
            if len(matches) < limit:
                record: dict[str, Any] = {"address": _address(target.sheet, r, c)}
                if a.include_values:
                    if search_in in ("values", "both"):
                        record["value"] = jsonable(value)
                    if search_in in ("formulas", "both"):
                        record["formula"] = formula
                matches.append(record)
    columns = ["address"]
    if a.include_values:
        columns += [k for k in ("value", "formula") if search_in in (k + "s", "both")]
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "query": query,
        "total_matches": total,
        "returned": len(matches),
        "result_truncated": total > len(matches),
        "include_values": bool(a.include_values),
        "matches_csv": _csv(matches, columns),
        "truncated": total > len(matches),
    }
    return _fit_csv(payload, matches, columns)


def _csv(records: list[dict[str, Any]], columns: list[str]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for record in records:
        writer.writerow(
            ["" if record.get(k) is None else record.get(k) for k in columns]
        )  # fmt: skip
    return out.getvalue().rstrip("\n")


def _fit_csv(payload: dict[str, Any], matches: list[dict[str, Any]], columns: list[str]) -> str:
    keep = len(matches)
    while len(dumps(payload)) > MAX_RESPONSE_CHARS and keep > 1:
        keep //= 2
        payload.update(matches_csv=_csv(matches[:keep], columns), returned=keep)
        payload["truncated"] = payload["response_truncated"] = True
    if len(dumps(payload)) > MAX_RESPONSE_CHARS:
        return dumps({"status": "success", "total_matches": payload["total_matches"],
                      "truncated": True, "response_truncated": True})  # fmt: skip
    return dumps(payload)


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
    values = _computed(ctx)
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


def recalculate_and_read(ctx: ToolContext, a: SrlArgs) -> str:
    if not a.cell_ranges:
        raise SrlError("invalid_arguments", "cell_ranges is empty; pass A1 ranges to read.")
    if len(a.cell_ranges) > MAX_RANGES:
        raise SrlError("too_many_ranges", f"at most {MAX_RANGES} ranges per call.")
    targets = [ctx.book.parse_range(qualify(ctx, t, None), clip=True) for t in a.cell_ranges]
    try:
        values = _evaluated(ctx)
    except ToolError as exc:
        raise SrlError("recalc_failed", str(exc)) from None
    ranges = []
    for target in targets:
        sheet = values.get(target.sheet, {})
        if target.size <= RECALC_MATRIX_CELLS:
            matrix = [
                [jsonable(sheet.get((r, c))) for c in range(target.min_col, target.max_col + 1)]
                for r in range(target.min_row, target.max_row + 1)
            ]
            ranges.append({"range": target.a1(), "values": matrix})
            continue
        cells = [
            (r, c, sheet[(r, c)])
            for r, c in target.coordinates()
            if sheet.get((r, c)) not in (None, "")
        ]
        ranges.append({
            "range": target.a1(),
            "non_empty_cells": len(cells),
            "samples": [
                {"address": f"{column_letter(c)}{r}", "value": jsonable(v)}
                for r, c, v in cells[:RECALC_SAMPLES]
            ],
        })  # fmt: skip
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "updated": True,
        "values_source": "recalculated",
        "ranges": ranges,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ("samples", "values"))


def code_interpreter(ctx: ToolContext, a: SrlArgs) -> str:
    """Upstream's sandbox answer: ``Code executed successfully:`` and stdout, or the failure."""
    result, _ = run_code(ctx, a.code, workbook=CODE_WORKBOOK)
    if result.exit_code == 0 and not result.error and not result.timed_out:
        return "Code executed successfully:\n" + result.stdout
    if result.timed_out:
        status = "timeout"
    elif result.error and result.exit_code is None:
        status = "sandbox_error"
    else:
        status = "runtime_error"
    code = f" (exit_code={result.exit_code})" if result.exit_code is not None else ""
    details = (result.stdout + result.stderr) or (result.error or "")
    return f"Code execution failed with status: {status}{code}" + (
        f"\n{details}" if details else ""
    )


# ---- upstream's own descriptions, from a copy the user holds ----------------------------------
def _facts(schema: dict[str, Any]) -> tuple[list[tuple[object, ...]], list[object]]:
    params = schema["function"].get("parameters") or {}
    props = params.get("properties") or {}
    return (
        [
            (k, v.get("type"), v.get("enum"), (v.get("items") or {}).get("type"))
            for k, v in props.items()
        ],
        list(params.get("required") or []),
    )


def with_upstream_descriptions(
    schemas: list[dict[str, Any]], yaml_path: str | Path
) -> list[dict[str, Any]]:
    """``schemas`` with the descriptions of a copy of upstream's ``spreadsheet_tools.yaml``.

    The released checkpoint read upstream's wording; this project does not ship
    it, but a user with the repository can point ``env.tool_descriptions`` at
    its yaml. Only descriptions are taken, and only for tools whose argument
    facts (names, order, types, enums, items, required) equal this preset's;
    anything else raises a ConfigError naming the file and the tool.
    """
    import yaml

    path = Path(yaml_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"env.tool_descriptions {path}: cannot read it ({exc})") from None
    entries = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"env.tool_descriptions {path}: no 'tools' list (upstream's layout)")
    theirs = {}
    for entry in entries:
        schema = entry.get("tool_schema") if isinstance(entry, dict) else None
        name = ((schema or {}).get("function") or {}).get("name")
        if isinstance(name, str):
            theirs[name] = schema
    out = copy.deepcopy(schemas)
    for schema in out:
        fn = schema["function"]
        other = theirs.get(fn["name"])
        if other is None:
            continue
        if _facts(other) != _facts(schema):
            raise ConfigError(
                f"env.tool_descriptions {path}: the arguments of {fn['name']} differ from the "
                "spreadsheet-rl preset's; descriptions are taken only over equal facts"
            )
        if isinstance(other["function"].get("description"), str):
            fn["description"] = other["function"]["description"]
        for key, prop in fn["parameters"]["properties"].items():
            text = other["function"]["parameters"]["properties"][key].get("description")
            if isinstance(text, str):
                prop["description"] = text
            else:
                prop.pop("description", None)
    return out


# ---- registry ----------------------------------------------------------------------------------
_RUN: dict[str, Callable[[ToolContext, SrlArgs], str]] = {
    "inspect_range": inspect_range,
    "list_sheets": list_sheets,
    "manage_sheet": manage_sheet,
    "find_cells": find_cells,
    "write_range": write_range,
    "format_range": format_range,
    "fill_formula": fill_formula,
    "clear_range": clear_range,
    "delete_rows": delete_rows,
    "delete_columns": delete_columns,
    "recalculate_and_read": recalculate_and_read,
    "code_interpreter": code_interpreter,
}
PARALLEL_SAFE = frozenset({"inspect_range", "list_sheets", "find_cells"})  # upstream's yaml


def _with_path(
    name: str, run: Callable[[ToolContext, SrlArgs], str]
) -> Callable[[ToolContext, SrlArgs], str]:
    def call(ctx: ToolContext, args: SrlArgs) -> str:
        if hasattr(args, "path"):
            check_path(ctx, args.path)
        return run(ctx, args)

    call.__name__ = name
    return call


def reply_error(exc: ToolError) -> ReplyError:
    """A refused call as upstream's JSON error (code, message), for the model to read."""
    message = str(exc)
    code = getattr(exc, "code", None)
    if code is None and message.startswith("bad arguments"):
        code = "invalid_arguments"
    elif code is None and message.startswith("sheet ") and "does not exist" in message:
        code = "sheet_not_found"
    return ReplyError(message, error_reply(code or "tool_error", message))


def tools() -> list[Tool]:
    """The preset's tools: upstream's schemas over the gym's behaviour, errors as JSON."""
    out = []
    for name, _, _, _ in _SPECS:
        out.append(
            Tool(
                name,
                SCHEMAS[name]["function"]["description"],
                _args_model(name),
                _with_path(name, _RUN[name]),
                parallel_safe=name in PARALLEL_SAFE,
                fixed_schema=SCHEMAS[name],
                on_error=None if name == "code_interpreter" else reply_error,
            )
        )
    return out

"""Delete rows or columns the way Excel does: references follow the cells they point at.

openpyxl's ``delete_rows``/``delete_cols`` only move cell values, so a formula
like ``=SUM(B2:B10)`` below or beside the deleted rows would go on pointing at
the old addresses and a correct agent would be scored on wrong numbers.
Here every formula in the workbook that refers to the edited sheet is
rewritten: references past the deletion move back, ranges that lose some of
their rows shrink, references to deleted cells become ``#REF!``. Merged cells
and defined names move as well. (Conditional formats, data validations and
charts are left as openpyxl leaves them.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

from openpyxl.cell.cell import Cell
from openpyxl.formula.tokenizer import Tokenizer
from openpyxl.utils.cell import column_index_from_string, get_column_letter
from openpyxl.workbook.defined_name import DefinedName
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.worksheet import Worksheet

Axis = Literal["row", "col"]

_CELL = re.compile(r"^(\$?)([A-Za-z]{1,3})(\$?)(\d+)$")
_COLS = re.compile(r"^(\$?)([A-Za-z]{1,3}):(\$?)([A-Za-z]{1,3})$")
_ROWS = re.compile(r"^(\$?)(\d+):(\$?)(\d+)$")
_MAX_COL, _MAX_ROW = 16384, 1048576
REF_ERROR = "#REF!"


def delete_and_shift(wb: Workbook, ws: Worksheet, axis: Axis, start: int, count: int) -> int:
    """Delete ``count`` rows/columns of ``ws`` from ``start``; returns how many formulas changed."""
    if axis == "row":
        ws.delete_rows(start, count)
    else:
        ws.delete_cols(start, count)
    changed = 0
    for sheet in wb.worksheets:
        # existing cells only: iter_rows() would create every empty cell of the used area
        for cell in list(sheet._cells.values()):
            changed += _rewrite_cell(cell, sheet.title, ws.title, axis, start, count)
    _shift_merged(ws, axis, start, count)
    for name in list(_defined_names(wb)):
        if name.attr_text:
            text = shift_formula("=" + name.attr_text, None, ws.title, axis, start, count)
            name.attr_text = text[1:]
    return changed


def shift_formula(
    formula: str, home: str | None, target: str, axis: Axis, start: int, count: int
) -> str:
    """``formula`` (on sheet ``home``; None for a defined name) after deleting
    ``count`` rows/columns from ``start`` on sheet ``target``."""
    if not formula.startswith("="):
        return formula
    try:
        tokens = Tokenizer(formula)
    except Exception:  # not something we can parse: leave it as it is
        return formula
    changed = False
    for token in tokens.items:
        if token.type == "OPERAND" and token.subtype == "RANGE":
            new = _shift_operand(token.value, home, target, axis, start, count)
            if new != token.value:
                token.value, changed = new, True
    return tokens.render() if changed else formula


def _rewrite_cell(cell: Cell, home: str, target: str, axis: Axis, start: int, count: int) -> int:
    value = cell.value
    array = isinstance(getattr(value, "text", None), str)  # array formulas keep text on an object
    text = value.text if array else value
    if not isinstance(text, str):
        return 0
    new = shift_formula(text, home, target, axis, start, count)
    if new == text:
        return 0
    if array:
        value.text = new
    else:
        cell.value = new
    return 1


def _shift_operand(
    operand: str, home: str | None, target: str, axis: Axis, start: int, count: int
) -> str:
    prefix, bang, ref = operand.rpartition("!")
    sheet = _unquote(prefix) if bang else home
    if sheet is None or sheet.lower() != target.lower() or "[" in operand:
        return operand  # another sheet, a 3-D or external reference, or a table column
    shifted = _shift_ref(ref, axis, start, count)
    if shifted is None:
        return operand
    if shifted == REF_ERROR:
        return REF_ERROR
    return f"{prefix}{bang}{shifted}"


def _shift_ref(ref: str, axis: Axis, start: int, count: int) -> str | None:
    """The reference after the deletion, REF_ERROR if it is gone, None if it is no reference."""
    parts = ref.split(":")
    if len(parts) == 1:
        cell = _parse_cell(ref)
        if cell is None:
            return None
        pos = cell[1] if axis == "row" else cell[0]
        if start <= pos < start + count:
            return REF_ERROR
        return _format_cell(cell, axis, pos - count if pos >= start + count else pos)
    if len(parts) != 2:
        return None
    first, last = _parse_cell(parts[0]), _parse_cell(parts[1])
    if first is not None and last is not None:
        lo_pos = first[1] if axis == "row" else first[0]
        hi_pos = last[1] if axis == "row" else last[0]
        span = _shift_span(min(lo_pos, hi_pos), max(lo_pos, hi_pos), start, count)
        if span is None:
            return REF_ERROR
        if lo_pos > hi_pos:
            span = (span[1], span[0])
        return _format_cell(first, axis, span[0]) + ":" + _format_cell(last, axis, span[1])
    whole = _ROWS.match(ref) if axis == "row" else _COLS.match(ref)
    if whole is None:
        return None  # a whole-column range under a row deletion (or vice versa) stays
    lo_abs, lo, hi_abs, hi = whole.groups()
    lo_pos, hi_pos = (int(lo), int(hi)) if axis == "row" else (_col(lo), _col(hi))
    span = _shift_span(min(lo_pos, hi_pos), max(lo_pos, hi_pos), start, count)
    if span is None:
        return REF_ERROR
    show = str if axis == "row" else get_column_letter
    return f"{lo_abs}{show(span[0])}:{hi_abs}{show(span[1])}"


def _shift_span(lo: int, hi: int, start: int, count: int) -> tuple[int, int] | None:
    end = start + count - 1
    new_lo = lo if lo < start else (start if lo <= end else lo - count)
    new_hi = hi if hi < start else (start - 1 if hi <= end else hi - count)
    return None if new_lo > new_hi else (new_lo, new_hi)


def _parse_cell(text: str) -> tuple[int, int, str, str] | None:
    """(column, row, column-$, row-$) of an A1 reference, or None."""
    match = _CELL.match(text)
    if match is None:
        return None
    col_abs, letters, row_abs, digits = match.groups()
    col, row = _col(letters), int(digits)
    if not (1 <= col <= _MAX_COL and 1 <= row <= _MAX_ROW):
        return None  # e.g. a defined name that looks like letters and digits
    return col, row, col_abs, row_abs


def _format_cell(cell: tuple[int, int, str, str], axis: Axis, pos: int) -> str:
    col, row, col_abs, row_abs = cell
    if axis == "row":
        row = pos
    else:
        col = pos
    return f"{col_abs}{get_column_letter(col)}{row_abs}{row}"


def _col(letters: str) -> int:
    return column_index_from_string(letters.upper())


def _unquote(prefix: str) -> str:
    if len(prefix) >= 2 and prefix[0] == prefix[-1] == "'":
        return prefix[1:-1].replace("''", "'")
    return prefix


def _shift_merged(ws: Worksheet, axis: Axis, start: int, count: int) -> None:
    for merged in list(ws.merged_cells.ranges):
        lo, hi = (
            (merged.min_row, merged.max_row) if axis == "row" else (merged.min_col, merged.max_col)
        )
        span = _shift_span(lo, hi, start, count)
        ws.merged_cells.remove(merged)
        if span is None:
            continue
        if axis == "row":
            bounds = (merged.min_col, span[0], merged.max_col, span[1])
        else:
            bounds = (span[0], merged.min_row, span[1], merged.max_row)
        if bounds[0] == bounds[2] and bounds[1] == bounds[3]:
            continue  # shrank to one cell: no longer a merge
        ws.merge_cells(
            start_column=bounds[0], start_row=bounds[1], end_column=bounds[2], end_row=bounds[3]
        )


def _defined_names(wb: Workbook) -> Iterator[DefinedName]:
    names = wb.defined_names
    yield from names.values() if hasattr(names, "values") else names.definedName
    for sheet in wb.worksheets:
        local = getattr(sheet, "defined_names", None)
        if local:
            yield from local.values()

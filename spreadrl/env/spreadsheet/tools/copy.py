"""copy_range: copy one rectangle of cells (values, formulas, styles, comments, links) elsewhere.

The gym's own copy, shared by spreadrl's ``copy_range`` tool and the
``spreadsheet-rl-2606`` preset's. Its contract is Spreadsheet-RL's
(``verl/verl/tools/copy_range.py``), written here from the facts, not the code:

- the source is one finite rectangle (``A1:C3``; no list, no whole rows or
  columns);
- the destination is a top-left cell (the copy takes the source's shape), a
  range of the source's shape, or, for a one-cell source only, any larger
  range (the cell fills it);
- formulas move as Excel's copy moves them: relative references shift by the
  distance copied, ``$`` parts stay; text that merely starts with ``=`` stays
  text;
- each cell's style, comment and hyperlink go with it (an empty one clears the
  destination's); merged placeholders in the destination are skipped and
  counted;
- the whole source is read before anything is written, so a copy onto an
  overlapping range reads the original cells;
- a cap on cells (source and destination) refuses oversized copies.
"""

from __future__ import annotations

import re
from copy import copy as shallow
from dataclasses import dataclass
from typing import Any

from openpyxl.cell.cell import Cell, MergedCell
from openpyxl.comments import Comment
from openpyxl.formula.translate import Translator, TranslatorError
from openpyxl.worksheet.cell_range import CellRange as OpenpyxlRange
from openpyxl.worksheet.formula import ArrayFormula
from openpyxl.worksheet.hyperlink import Hyperlink
from openpyxl.worksheet.worksheet import Worksheet
from pydantic import Field

from spreadrl.env.spreadsheet.tools.base import Tool, ToolContext
from spreadrl.env.spreadsheet.tools.common import Args
from spreadrl.env.spreadsheet.workbook import (
    MAX_COLUMN,
    MAX_ROW,
    CellRange,
    ToolError,
    WorkingCopy,
    column_letter,
    quote_sheet,
    render_value,
    split_reference,
)

_CELL_OR_RECT = re.compile(r"^\$?[A-Za-z]{1,3}\$?\d+(?::\$?[A-Za-z]{1,3}\$?\d+)?$")


@dataclass(frozen=True)
class _Snapshot:
    """One source cell as it was before the copy wrote anything."""

    row: int
    col: int
    value: Any
    formula: bool  # openpyxl's data type "f": text starting with "=" may be plain text
    style: Any
    comment: Comment | None
    hyperlink: Hyperlink | None


@dataclass(frozen=True)
class CopyDone:
    """What a copy did: the ranges it read and wrote, and the cells it wrote or skipped."""

    source: CellRange
    target: CellRange
    copied: int
    skipped_merged: int


def source_range(book: WorkingCopy, text: str, sheet: str | None = None) -> CellRange:
    """The source rectangle ``text`` names (on ``sheet`` when it names none)."""
    return _rectangle(book, text, sheet, "source")


def target_range(
    book: WorkingCopy, text: str, source: CellRange, sheet: str | None = None
) -> CellRange:
    """Where a copy of ``source`` lands: ``text`` is a top-left cell or a range (rules above)."""
    anchor = _rectangle(book, text, sheet, "destination")
    _, ref = split_reference(text)
    if ":" not in ref:
        max_row = anchor.min_row + source.rows - 1
        max_col = anchor.min_col + source.cols - 1
        if max_row > MAX_ROW or max_col > MAX_COLUMN:
            raise ToolError(
                f"copying {source.rows}x{source.cols} cells to {anchor.a1()} runs past the "
                "sheet's last row or column"
            )
        return CellRange(anchor.sheet, anchor.min_row, anchor.min_col, max_row, max_col)
    same_shape = (anchor.rows, anchor.cols) == (source.rows, source.cols)
    if not same_shape and source.size != 1:
        raise ToolError(
            f"the destination must be one top-left cell, a range of the source's shape "
            f"({source.rows}x{source.cols}), or any range when the source is one cell; "
            f"{anchor.a1()} is {anchor.rows}x{anchor.cols}"
        )
    return anchor


def _rectangle(book: WorkingCopy, text: object, sheet: str | None, what: str) -> CellRange:
    if not isinstance(text, str) or not text.strip():
        raise ToolError(f"the {what} must be an A1 cell or range like B2 or Sheet1!A1:C3")
    named, ref = split_reference(text)
    if "," in ref:
        raise ToolError(f"the {what} must be one rectangle; copy the ranges one at a time")
    if not _CELL_OR_RECT.match(ref.strip()):
        raise ToolError(
            f"the {what} {text!r} must be a cell range such as A1:C3, not whole rows or columns"
        )
    if named is None and sheet is not None:
        return book.parse_range(f"{quote_sheet(book.sheet_name(sheet))}!{ref}")
    return book.parse_range(text)


def copy_cells(book: WorkingCopy, source: CellRange, target: CellRange, cap: int) -> CopyDone:
    """Copy ``source`` onto ``target`` (from :func:`target_range`); refuses over ``cap`` cells."""
    for what, rng in (("source", source), ("destination", target)):
        if cap > 0 and rng.size > cap:
            raise ToolError(
                f"the {what} {rng.a1()} has {rng.size} cells, over the {cap}-cell limit of "
                "copy_range; copy it in parts"
            )
    src_ws, dst_ws = book.wb[source.sheet], book.wb[target.sheet]
    snaps = [_snapshot(src_ws, r, c) for r, c in source.coordinates()]
    copied = skipped = 0
    for r, c in target.coordinates():
        if source.size == 1:
            snap = snaps[0]
        else:
            snap = snaps[(r - target.min_row) * source.cols + (c - target.min_col)]
        cell = dst_ws.cell(r, c)
        if isinstance(cell, MergedCell):
            skipped += 1
            continue
        _apply(snap, cell, r, c)
        copied += 1
    if copied:
        book.touch()
    return CopyDone(source, target, copied, skipped)


def _snapshot(ws: Worksheet, row: int, col: int) -> _Snapshot:
    cell = ws._cells.get((row, col))
    if cell is None or isinstance(cell, MergedCell):
        return _Snapshot(row, col, None, False, None, None, None)
    return _Snapshot(
        row,
        col,
        cell.value,
        cell.data_type == "f",
        shallow(cell._style),
        shallow(cell.comment) if cell.comment is not None else None,
        shallow(cell.hyperlink) if cell.hyperlink is not None else None,
    )


def _apply(snap: _Snapshot, cell: Cell, row: int, col: int) -> None:
    """Write one snapshot into ``cell``: value (formulas moved), style, comment, link."""
    value = _moved(snap, row, col) if snap.formula else snap.value
    if snap.style is not None:
        cell._style = shallow(snap.style)
    cell.value = value
    if not snap.formula and isinstance(value, str) and value.startswith("="):
        cell.data_type = "s"  # text that only looks like a formula stays text
    cell.comment = shallow(snap.comment) if snap.comment is not None else None
    link = shallow(snap.hyperlink) if snap.hyperlink is not None else None
    if link is not None:
        link.ref = cell.coordinate
    cell.hyperlink = link


def _moved(snap: _Snapshot, row: int, col: int) -> object:
    """The snapshot's formula as it reads copied to (row, col); an array formula's area moves too."""
    origin = f"{column_letter(snap.col)}{snap.row}"
    dest = f"{column_letter(col)}{row}"
    value = snap.value
    if isinstance(value, ArrayFormula):
        area = OpenpyxlRange(value.ref or origin)
        try:
            area.shift(col_shift=col - snap.col, row_shift=row - snap.row)
        except ValueError:
            raise ToolError(f"the array formula at {origin} cannot move to {dest}") from None
        return ArrayFormula(ref=area.coord, text=_translate(value.text or "", origin, dest))
    if isinstance(value, str):
        return _translate(value, origin, dest)
    return value


def _translate(formula: str, origin: str, dest: str) -> str:
    """The formula moved; one openpyxl cannot move is copied as it is (as Excel's text)."""
    try:
        return Translator(formula, origin=origin).translate_formula(dest)
    except (TranslatorError, ValueError):
        return formula


# ---- spreadrl's own copy_range tool -----------------------------------------------------------
class CopyArgs(Args):
    source: str = Field(description="The rectangle to copy, e.g. 'Sheet1!A1:C3' (one range).")
    destination: str = Field(
        description="Where it goes: its top-left cell (e.g. 'Sheet2!E1'), a range of the same "
        "shape, or any range when the source is one cell (the cell fills it)."
    )


def copy_range(ctx: ToolContext, args: CopyArgs) -> str:
    source = source_range(ctx.book, args.source)
    target = target_range(ctx.book, args.destination, source)
    done = copy_cells(ctx.book, source, target, ctx.config.max_write_cells)
    lines = [f"copied {done.source.a1()} to {done.target.a1()}: {done.copied} cells"]
    if done.skipped_merged:
        lines.append(f"skipped {done.skipped_merged} merged placeholder cells")
    ws = ctx.book.wb[target.sheet]
    corner = ws.cell(target.min_row, target.min_col).value
    lines.append(f"{column_letter(target.min_col)}{target.min_row}: {render_value(corner)}")
    return "\n".join(lines)


TOOLS = [
    Tool(
        "copy_range",
        "Copy a rectangle of cells (values, formulas with relative references moved, styles, "
        "comments, links) to a top-left cell or a same-shaped range; a single cell fills any "
        "range.",
        CopyArgs,
        copy_range,
    ),
]

"""copy_range in the June 2026 scaffold's shape, over the gym's own copy (:mod:`spreadrl.env.spreadsheet.tools.copy`).

Upstream's contract (``verl/verl/tools/copy_range.py``, yaml at 5335ee0b): the
source's sheet is the one its range names, else ``source_sheet_name``, else
``sheet_name``, else the first sheet; the destination's is the one its range
names, else ``destination_sheet_name``, else ``sheet_name``, else the source's.
A named sheet that differs from the matching ``*_sheet_name`` is refused. The
reply gives both ranges sheet-qualified, ``copied_cells``, a ``sample_csv``
(address, value, formula) of a few destination cells, and
``skipped_merged_cells`` with status ``partial_success`` when merged
placeholders were skipped. Nothing is recalculated.
"""

from __future__ import annotations

import csv
import io

from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.copy import copy_cells, source_range, target_range
from spreadrl.env.spreadsheet.tools.srl.arguments import SrlArgs
from spreadrl.env.spreadsheet.tools.srl.replies import (
    MAX_RESPONSE_CHARS,
    WORKBOOK,
    SrlError,
    fit,
    jsonable,
)
from spreadrl.env.spreadsheet.workbook import CellRange, ToolError, split_reference

MAX_COPY_CELLS = 300_000  # upstream's max_copy_cells


def _sheet_for(text: str, named_arg: str | None, what: str) -> str | None:
    """The sheet a range is read on when its text names none; a mismatch is refused."""
    named, _ = split_reference(text)
    mismatch = named_arg is not None and named is not None
    if mismatch and named.casefold() != named_arg.strip().casefold():
        raise ToolError(f"{what} sheet mismatch: {named_arg!r} vs {named!r}")
    return None if named is not None else named_arg


def _indices(count: int, head: int, tail: int) -> list[int]:
    if count <= head + tail:
        return list(range(count))
    return [*range(head), *range(count - tail, count)]


def sample_csv(ctx: ToolContext, target: CellRange) -> str:
    """A few destination cells as CSV: a line's ends, or a block's four corners' cells."""
    if target.rows == 1 or target.cols == 1:
        rows = [target.min_row + i for i in _indices(target.rows, 3, 3)]
        cols = [target.min_col + i for i in _indices(target.cols, 3, 3)]
    else:
        rows = [target.min_row + i for i in _indices(target.rows, 2, 2)]
        cols = [target.min_col + i for i in _indices(target.cols, 2, 2)]
    ws = ctx.book.wb[target.sheet]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["address", "value", "formula"])
    for r in rows:
        for c in cols:
            cell = ws.cell(r, c)
            formula = cell.value if cell.data_type == "f" and isinstance(cell.value, str) else None
            value = "" if formula is not None else jsonable(cell.value)
            address = CellRange(target.sheet, r, c, r, c).a1()
            writer.writerow([address, "" if value is None else value, formula or ""])
    return out.getvalue().rstrip("\n")


def copy_range(ctx: ToolContext, a: SrlArgs) -> str:
    for field, code in (("source_range", "invalid_source_range"),
                        ("destination_range", "invalid_destination_range")):  # fmt: skip
        text = getattr(a, field)
        if not isinstance(text, str) or not text.strip():
            raise SrlError(code, f"{field} must be a non-empty A1 range such as A1:C3.")
    try:
        src_sheet = _sheet_for(a.source_range, a.source_sheet_name, "source")
        dst_sheet = _sheet_for(a.destination_range, a.destination_sheet_name, "destination")
        source = source_range(ctx.book, a.source_range.strip(), src_sheet or a.sheet_name)
        fallback = dst_sheet or a.sheet_name or source.sheet
        target = target_range(ctx.book, a.destination_range.strip(), source, fallback)
        done = copy_cells(ctx.book, source, target, MAX_COPY_CELLS)
    except ToolError as exc:
        raise SrlError("copy_failed", f"failed to copy range: {exc}") from None
    payload = {
        "status": "success" if not done.skipped_merged else "partial_success",
        "file": WORKBOOK,
        "source_range": done.source.a1(),
        "destination_range": done.target.a1(),
        "copied_cells": done.copied,
        "truncated": False,
        "sample_csv": sample_csv(ctx, done.target),
    }
    if done.skipped_merged:
        payload["skipped_merged_cells"] = done.skipped_merged
    return fit(payload, MAX_RESPONSE_CHARS, ("sample_csv",))

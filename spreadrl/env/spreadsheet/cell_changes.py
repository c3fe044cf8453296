"""Which cells a tool call changed, with their values before and after.

The gym's tools edit the in-memory working copy; ``WorkingCopy.version`` counts
edits, and the code interpreter's edits arrive as a reload of the whole file.
No tool reports the cells it touched (``delete_rows`` moves thousands, the code
interpreter may change any), so the tracker diffs snapshots of stored values
(formula text for formulas) taken only when the version moved: a read-only call
costs nothing, an edit costs one pass over the workbook's stored cells.

Used for looking at runs (``spreadrl view``, the serve page), never for the
reward. Workbooks above ``max_cells`` stored cells are not tracked (the step's
info says so) to keep big SpreadsheetBench books fast.
"""

from __future__ import annotations

from typing import Any

from openpyxl.utils.cell import get_column_letter
from openpyxl.workbook.workbook import Workbook

from spreadrl.data.jsontypes import JSONScalar, scalar_or_str
from spreadrl.env.spreadsheet.workbook import WorkingCopy

MAX_TRACKED_CELLS = 100_000
MAX_CHANGES_PER_CALL = 50

Snapshot = dict[str, dict[tuple[int, int], Any]]  # sheet -> (row, column) -> stored value


def cell_json(value: object) -> JSONScalar:
    """A stored cell value as JSON: scalars as they are, anything else (dates, arrays) as text
    (an array formula's own text)."""
    return scalar_or_str(getattr(value, "text", value))


def stored_cells(wb: Workbook) -> int:
    """How many cells openpyxl holds for ``wb`` (cheap: no cell is visited)."""
    return sum(len(ws._cells) for ws in wb.worksheets)


def snapshot(wb: Workbook) -> Snapshot:
    """Every non-empty stored value of ``wb``, per sheet, keyed by (row, column).

    Reads openpyxl's private ``_cells`` and ``_value`` directly: the public accessors
    create missing cells or go through properties, several times slower."""
    return {
        ws.title: {k: c._value for k, c in ws._cells.items() if c._value is not None}
        for ws in wb.worksheets
    }


def _changed_keys(old: dict[tuple[int, int], Any], new: dict[tuple[int, int], Any]) -> set:
    try:  # values are hashable in practice (numbers, text, dates): compare as sets
        return {k for k, _ in old.items() ^ new.items()}
    except TypeError:
        return {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}


def diff(before: Snapshot, after: Snapshot, limit: int = MAX_CHANGES_PER_CALL) -> dict[str, Any]:
    """Cells whose value differs, row by row per sheet: ``{"cells": [...], "total": n}``.

    Each cell is ``{"sheet", "cell", "before", "after"}`` with JSON values (None = empty).
    """
    keys = []
    for sheet in sorted(before.keys() | after.keys()):
        old, new = before.get(sheet, {}), after.get(sheet, {})
        keys += [(sheet, r, c) for r, c in _changed_keys(old, new)]
    keys.sort()
    cells = [
        {
            "sheet": sheet,
            "cell": f"{get_column_letter(col)}{row}",
            "before": cell_json(before.get(sheet, {}).get((row, col))),
            "after": cell_json(after.get(sheet, {}).get((row, col))),
        }
        for sheet, row, col in keys[:limit]
    ]
    return {"cells": cells, "total": len(keys)}


class CellChangeTracker:
    """Snapshots a working copy around tool calls: ``before(book)``, run the call, ``after(book)``."""

    def __init__(self, max_cells: int = MAX_TRACKED_CELLS, limit: int = MAX_CHANGES_PER_CALL):
        self.max_cells = max_cells
        self.limit = limit
        self._snapshot: Snapshot | None = None
        self._version: int | None = None

    def before(self, book: WorkingCopy) -> None:
        """Make sure a snapshot of ``book`` at its current version exists."""
        if self._snapshot is not None and self._version == book.version:
            return
        if stored_cells(book.wb) > self.max_cells:
            self._snapshot, self._version = None, None
            return
        self._snapshot, self._version = snapshot(book.wb), book.version

    def after(self, book: WorkingCopy) -> dict[str, Any]:
        """``{"changed_cells": {...}}`` when the call edited ``book``, else ``{}`` (for step info)."""
        if self._version == book.version:
            return {}
        if self._snapshot is None or stored_cells(book.wb) > self.max_cells:
            self._snapshot, self._version = None, None
            return {"changed_cells": {"cells": [], "total": 0, "skipped": "workbook too large"}}
        new = snapshot(book.wb)
        changes = diff(self._snapshot, new, self.limit)
        self._snapshot, self._version = new, book.version
        return {"changed_cells": changes} if changes["total"] else {}

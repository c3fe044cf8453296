"""A small grid of a workbook's first sheet, for the serve page's before/after preview.

Read-only openpyxl over at most ``max_rows`` x ``max_cols`` cells: a formula shows as
its text (what the agent wrote), a value as text; nothing else of the file is read.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from spreadrl.archive_gate import WorkbookRefused, check_archive

MAX_ROWS, MAX_COLS = 15, 8


def workbook_grid(
    source: Path | bytes, max_rows: int = MAX_ROWS, max_cols: int = MAX_COLS
) -> dict[str, Any]:
    """``{"sheet", "rows": [[text]], "more_rows", "more_cols"}`` of the first sheet;
    ``{"error": ...}`` when the file cannot be read as a workbook."""
    import openpyxl

    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        check_archive(source, name="the previewed workbook")
        book = openpyxl.load_workbook(handle, read_only=True)
    except WorkbookRefused as exc:
        return {"error": f"cannot preview this workbook: {exc}"}
    except Exception as exc:  # noqa: BLE001  # any unreadable file: the preview says so
        return {"error": f"cannot preview this workbook ({type(exc).__name__})"}
    try:
        sheet = book.worksheets[0]
        rows = [
            ["" if v is None else str(v) for v in row]
            for row in sheet.iter_rows(max_row=max_rows, max_col=max_cols, values_only=True)
        ]
        return {
            "sheet": sheet.title,
            "rows": rows,
            "more_rows": (sheet.max_row or 0) > max_rows,
            "more_cols": (sheet.max_column or 0) > max_cols,
        }
    finally:
        book.close()

"""The episode's working copy: one openpyxl workbook kept in memory between tool calls.

Loading and saving an .xlsx costs tens of milliseconds, far more than any edit,
so the gym loads the copy once at reset, edits it in memory, and writes it to
``workbook.xlsx`` only when something outside the process needs the file
(recalculation, the code interpreter, scoring). ``version`` counts edits so a
recalculation can be reused while nothing changed.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
import re
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import openpyxl
from openpyxl.utils.cell import (
    column_index_from_string,
    coordinate_from_string,
    get_column_letter,
)
from openpyxl.utils.exceptions import CellCoordinatesException
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.worksheet import Worksheet

from spreadrl.archive_gate import check_archive
from spreadrl.errors import WorkbookError

MAX_ROW = 1_048_576
MAX_COLUMN = 16_384
WORKBOOK_NAME = "workbook.xlsx"


class ToolError(Exception):
    """A bad tool call: the message goes back to the model as ``Error: ...``."""


@dataclass(frozen=True)
class CellRange:
    """A resolved rectangular range on one worksheet (1-based, inclusive)."""

    sheet: str
    min_row: int
    min_col: int
    max_row: int
    max_col: int

    @property
    def rows(self) -> int:
        return self.max_row - self.min_row + 1

    @property
    def cols(self) -> int:
        return self.max_col - self.min_col + 1

    @property
    def size(self) -> int:
        return self.rows * self.cols

    def a1(self) -> str:
        """``Sheet!A1:B2`` (quoted sheet when needed)."""
        first = f"{column_letter(self.min_col)}{self.min_row}"
        last = f"{column_letter(self.max_col)}{self.max_row}"
        ref = first if first == last else f"{first}:{last}"
        return f"{quote_sheet(self.sheet)}!{ref}"

    def coordinates(self) -> list[tuple[int, int]]:
        """Cells row by row."""
        return [
            (r, c)
            for r in range(self.min_row, self.max_row + 1)
            for c in range(self.min_col, self.max_col + 1)
        ]


def column_letter(number: int) -> str:
    return get_column_letter(number)


def quote_sheet(name: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
        return name
    return "'" + name.replace("'", "''") + "'"


_CELL = r"\$?[A-Za-z]{1,3}\$?\d+"
_RANGE_RE = re.compile(
    rf"^(?:(?P<c1>{_CELL})(?::(?P<c2>{_CELL}))?"
    r"|(?P<col1>\$?[A-Za-z]{1,3}):(?P<col2>\$?[A-Za-z]{1,3})"
    r"|(?P<row1>\$?\d+):(?P<row2>\$?\d+))$"
)


def split_reference(text: str) -> tuple[str | None, str]:
    """``"'My sheet'!A1:B2"`` -> ``("My sheet", "A1:B2")``; no prefix -> ``(None, text)``."""
    text = text.strip()
    if "!" not in text:
        return None, text
    sheet, ref = text.rsplit("!", 1)
    sheet = sheet.strip()
    if len(sheet) >= 2 and sheet[0] == sheet[-1] == "'":
        sheet = sheet[1:-1].replace("''", "'")
    if not sheet:
        raise ToolError(f"range {text!r} has an empty sheet name; write it like Sheet1!A1:B2")
    return sheet, ref.strip()


class _ParsedInputs:
    """Parsed task inputs kept per process, so the G episodes of a case parse it once.

    A GRPO step resets G episodes on each case, and every reset used to load the
    input .xlsx with openpyxl and save it again (tens of ms each, most of a
    reset). The first reset of a source keeps its parsed workbook pickled and the
    bytes of its first save; later resets unpickle a private copy (a few ms: a
    deep copy, so episodes never share cells) and write the saved bytes. Entries
    are keyed by path, size and mtime, so an edited source is parsed again, and
    the least recently used go once they hold more than ``budget`` bytes.
    """

    def __init__(self, budget: int = 128 << 20, max_entry: int = 16 << 20) -> None:
        self.budget, self.max_entry, self.used = budget, max_entry, 0
        self.entries: OrderedDict[tuple[str, int, int], tuple[bytes, bytes]] = OrderedDict()
        self.lock = threading.Lock()

    @staticmethod
    def key(source: Path) -> tuple[str, int, int] | None:
        try:
            st = os.stat(source)
        except OSError:
            return None  # load_workbook reports the missing file
        return (str(Path(source).resolve()), st.st_size, st.st_mtime_ns)

    def get(self, key: tuple[str, int, int] | None) -> tuple[bytes, bytes] | None:
        if key is None:
            return None
        with self.lock:
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def put(self, key: tuple[str, int, int] | None, wb: Workbook, saved: Path) -> None:
        if key is None:
            return
        try:
            blob, data = pickle.dumps(wb, protocol=pickle.HIGHEST_PROTOCOL), saved.read_bytes()
        except Exception:  # a workbook part that does not pickle: parse it per episode
            return
        size = len(blob) + len(data)
        if size > self.max_entry:
            return
        with self.lock:
            old = self.entries.pop(key, None)
            self.used += size - (len(old[0]) + len(old[1]) if old else 0)
            self.entries[key] = (blob, data)
            while self.used > self.budget and len(self.entries) > 1:
                _, (b, d) = self.entries.popitem(last=False)
                self.used -= len(b) + len(d)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.used = 0


PARSED_INPUTS = _ParsedInputs()


class WorkingCopy:
    """The in-memory workbook of one episode and the file it is saved to."""

    def __init__(self, folder: Path, source: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / WORKBOOK_NAME
        self.version = 0
        self.saved_version = -1
        check_archive(source)
        key = PARSED_INPUTS.key(source)
        cached = PARSED_INPUTS.get(key)
        if cached is not None:
            blob, data = cached
            self.wb = pickle.loads(blob)
            self.path.write_bytes(data)
            self.saved_version = self.version
            return
        try:
            self.wb = openpyxl.load_workbook(source)
        except Exception as exc:  # openpyxl raises many types for a bad file
            raise WorkbookError(f"{source}: cannot open the task workbook ({exc})") from exc
        self.save()
        PARSED_INPUTS.put(key, self.wb, self.path)

    # ---- persistence -------------------------------------------------------
    def touch(self) -> None:
        """Mark the workbook edited."""
        self.version += 1

    def save(self) -> Path:
        """Write the workbook to ``workbook.xlsx`` (atomically) if it changed since the last save."""
        if self.saved_version == self.version and self.path.is_file():
            return self.path
        fd, tmp = tempfile.mkstemp(prefix=".save-", suffix=".xlsx", dir=self.folder)
        os.close(fd)
        try:
            self.wb.save(tmp)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.saved_version = self.version
        return self.path

    def reload(self) -> None:
        """Read ``workbook.xlsx`` back (after code edited the file); raises WorkbookError
        (:class:`~spreadrl.archive_gate.WorkbookRefused` for a file the gate refuses)."""
        check_archive(self.path, name=self.path.name)
        try:
            wb = openpyxl.load_workbook(self.path)
        except Exception as exc:
            raise WorkbookError(
                f"{self.path.name}: cannot be read ({type(exc).__name__}: {exc})"
            ) from exc
        self.wb = wb
        self.version += 1
        self.saved_version = self.version

    # ---- sheets and ranges -------------------------------------------------
    def sheet_name(self, name: str | None) -> str:
        """The workbook's spelling of ``name`` (exact, else case-insensitive); None = first sheet."""
        names = self.wb.sheetnames
        if name is None:
            return names[0]
        if name in names:
            return name
        folded = [n for n in names if n.lower() == name.strip().lower()]
        if len(folded) == 1:
            return folded[0]
        listed = ", ".join(repr(n) for n in names)
        raise ToolError(f"sheet {name!r} does not exist; sheets are: {listed}")

    def worksheet(self, name: str | None) -> Worksheet:
        return self.wb[self.sheet_name(name)]

    def parse_range(self, text: object, *, clip: bool = False) -> CellRange:
        """Resolve ``Sheet!A1:B2`` / ``A:C`` / ``2:5`` / ``B3`` on this workbook.

        Column-only and row-only ranges are bounded by the sheet's used area.
        ``clip`` also bounds ordinary ranges by it (for reads: nothing lies outside).
        """
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"range must be a string like 'Sheet1!A1:C10', got {text!r}")
        sheet_part, ref = split_reference(text)
        sheet = self.sheet_name(sheet_part)
        ws = self.wb[sheet]
        match = _RANGE_RE.match(ref.replace("$", "") if ref else "")
        if not match:
            raise ToolError(
                f"{text!r} is not an A1 range; use forms like A1, A1:C10, A:C, 2:5 "
                "or 'Sheet name'!A1:C10"
            )
        used_rows, used_cols = max(ws.max_row, 1), max(ws.max_column, 1)
        if match["c1"]:
            try:  # a row 0 (B0) matches the pattern and fails in openpyxl
                col1, row1 = coordinate_from_string(match["c1"].upper())
                col2, row2 = coordinate_from_string((match["c2"] or match["c1"]).upper())
            except CellCoordinatesException as exc:
                raise ToolError(
                    f"range {text!r} lies outside the sheet (rows 1-{MAX_ROW}, A-XFD)"
                ) from exc
            c1, c2 = column_index_from_string(col1), column_index_from_string(col2)
        elif match["col1"]:
            c1 = column_index_from_string(match["col1"].upper())
            c2 = column_index_from_string(match["col2"].upper())
            row1, row2 = 1, used_rows
        else:
            row1, row2 = int(match["row1"]), int(match["row2"])
            c1, c2 = 1, used_cols
        r1, r2 = sorted((row1, row2))
        c1, c2 = sorted((c1, c2))
        if r1 < 1 or r2 > MAX_ROW or c1 < 1 or c2 > MAX_COLUMN:
            raise ToolError(f"range {text!r} lies outside the sheet (rows 1-{MAX_ROW}, A-XFD)")
        if clip:
            r2, c2 = min(r2, used_rows), min(c2, used_cols)
            if r1 > r2 or c1 > c2:  # entirely outside the used area: keep one empty cell
                r2, c2 = r1, c1
        return CellRange(sheet, r1, c1, r2, c2)

    def dimensions(self, sheet: str) -> tuple[int, int]:
        """(rows, columns) of the used area, (0, 0) for an empty sheet."""
        ws = self.wb[sheet]
        if ws.max_row == 1 and ws.max_column == 1 and cell_value(ws, 1, 1) is None:
            return 0, 0
        return ws.max_row, ws.max_column


def cell_value(ws: Worksheet, row: int, col: int) -> object:
    """A cell's value without creating the cell (``ws.cell`` would grow the used area).

    Whatever openpyxl stores: a number, text (formulas start with ``=``), a bool, a
    date or time, None, or a formula object (array formulas); see :func:`render_value`.
    """
    cell = ws._cells.get((row, col))
    return None if cell is None else cell.value


class ErrorValue(str):
    """An Excel error computed by the engine (``#DIV/0!``): shown bare, not as quoted text."""


def render_value(value: object, max_chars: int = 200) -> str:
    """A cell value as compact, unambiguous text: strings quoted, numbers bare, formulas as written."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        text = repr(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ") if value.time() != dt.time() else value.date().isoformat()
    elif isinstance(value, dt.date | dt.time | dt.timedelta):
        text = str(value)
    elif isinstance(value, str):
        if value.startswith("=") or isinstance(value, ErrorValue):
            text = value
        else:
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    else:
        text = str(getattr(value, "text", value))  # ArrayFormula and friends
    if len(text) > max_chars:
        text = text[: max_chars - 3] + "..."
    return text


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters with a marker that says how much was dropped."""
    if limit <= 0 or len(text) <= limit:
        return text
    keep = max(limit - 60, 0)  # the marker is under 60 characters
    return text[:keep] + f"\n[truncated: {len(text) - keep} of {len(text)} characters not shown]"

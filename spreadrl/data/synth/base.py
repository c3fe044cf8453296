"""The family interface and the in-memory workbooks families build.

A family turns a seeded ``random.Random`` and a difficulty into a
:class:`TaskSpec`: one instruction that holds for 1-3 cases, each case an input
:class:`Book`, the answer Book (input plus the change, as computed values) and
the reference solution's tool calls. Families never touch the disk; the
synthesizer writes the Books with openpyxl, so every family gets the same
deterministic workbook writing for free.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias

from spreadrl.data.jsontypes import JSONValue
from spreadrl.errors import SpreadrlError

DIFFICULTIES = ("easy", "medium", "hard")
DATE_FORMAT = "yyyy-mm-dd"
_FIXED_TIME = dt.datetime(2024, 1, 1)
_EXCEL_EPOCH = dt.datetime(1899, 12, 30)  # workbook properties: no wall clock in outputs

CellValue: TypeAlias = str | int | float | bool | dt.datetime | None
"""A value the families put in a cell (formulas are text starting with ``=``)."""
CellData: TypeAlias = CellValue | list["CellData"]
"""One cell value, a row of them, or rows: what a write_range call carries."""


def column_letter(number: int) -> str:
    """1 -> "A", 28 -> "AB"."""
    name = ""
    while number > 0:
        number, rest = divmod(number - 1, 26)
        name = chr(65 + rest) + name
    return name


def cell_ref(row: int, column: int) -> str:
    return f"{column_letter(column)}{row}"


def range_ref(row1: int, col1: int, row2: int, col2: int) -> str:
    """A1 range; a single cell when both corners agree."""
    first, last = cell_ref(row1, col1), cell_ref(row2, col2)
    return first if first == last else f"{first}:{last}"


def sheet_prefix(sheet: str) -> str:
    """``Sheet1!`` or ``'Sales Data'!`` (quoted when the name is not a bare word)."""
    if sheet.replace("_", "").isalnum():
        return f"{sheet}!"
    return "'" + sheet.replace("'", "''") + "'!"


def json_value(value: CellData) -> JSONValue:
    """A cell value as a tool call can carry it: dates become Excel serial day numbers
    (which the checker compares equal to the date)."""
    if isinstance(value, dt.datetime):
        delta = value - _EXCEL_EPOCH
        return delta.days if not delta.seconds else delta.days + delta.seconds / 86400
    if isinstance(value, list):
        return [json_value(v) for v in value]
    return value


def write_call(cell_range: str, values: CellData) -> dict[str, Any]:
    """A write_range tool call of docs/tools.md (dates as serial numbers)."""
    return {"name": "write_range", "arguments": {"range": cell_range, "values": json_value(values)}}


def add_sheet_call(sheet: str) -> dict[str, Any]:
    """A manage_sheet add tool call of docs/tools.md."""
    return {"name": "manage_sheet", "arguments": {"action": "add", "sheet": sheet}}


class Book:
    """A workbook as ordered sheets of ``{(row, column): value}``; the first sheet is the default."""

    def __init__(self) -> None:
        self.sheets: dict[str, dict[tuple[int, int], Any]] = {}

    def sheet(self, name: str) -> dict[tuple[int, int], Any]:
        return self.sheets.setdefault(name, {})

    def copy(self) -> Book:
        other = Book()
        other.sheets = {name: dict(cells) for name, cells in self.sheets.items()}
        return other

    def write_table(
        self, sheet: str, top: int, left: int, header: list[str], rows: list[list[Any]]
    ) -> None:
        cells = self.sheet(sheet)
        for j, name in enumerate(header):
            cells[(top, left + j)] = name
        for i, row in enumerate(rows, start=1):
            for j, value in enumerate(row):
                cells[(top + i, left + j)] = value

    def write_block(self, sheet: str, top: int, left: int, rows: list[list[Any]]) -> None:
        """Write a block of values; None clears a cell (as ``""`` does in write_range)."""
        cells = self.sheet(sheet)
        for i, row in enumerate(rows):
            for j, value in enumerate(row):
                if value is None or value == "":
                    cells.pop((top + i, left + j), None)
                else:
                    cells[(top + i, left + j)] = value

    def save(self, path: Path) -> None:
        """Write with openpyxl; dates get a date format, properties a fixed timestamp."""
        import openpyxl

        wb = openpyxl.Workbook()
        wb.remove(wb.active)
        for name, cells in self.sheets.items():
            ws = wb.create_sheet(name)
            for (row, column), value in sorted(cells.items()):
                cell = ws.cell(row=row, column=column, value=value)
                if isinstance(value, dt.date):
                    cell.number_format = DATE_FORMAT
            widths: dict[int, int] = {}
            for (_, column), value in cells.items():
                widths[column] = max(widths.get(column, 8), min(len(str(value)) + 2, 40))
            for column, width in widths.items():
                ws.column_dimensions[column_letter(column)].width = width
        wb.properties.creator = "spreadrl synth"
        wb.properties.created = _FIXED_TIME
        wb.properties.modified = _FIXED_TIME
        wb.save(path)


@dataclass
class CaseSpec:
    """One case: the workbook given to the agent, the expected one, and a solution."""

    input: Book
    answer: Book
    calls: list[dict[str, Any]]


@dataclass
class TaskSpec:
    """What a family returns: the task text and its cases (same instruction for all)."""

    instruction: str
    instruction_type: str
    answer_position: str
    cases: list[CaseSpec]
    metadata: dict[str, Any] = field(default_factory=dict)


Builder = Callable[[random.Random, str, int], TaskSpec]


class SynthVerificationError(SpreadrlError):
    """A synthesized task failed its own checks (a bug in the family)."""


class CaseCheck(Protocol):
    """Checks one written case; returns its problems (empty when it is sound).

    The check grades with the environment's answer checker, which data must not
    import (imports run env -> data), so the caller passes one in:
    :func:`spreadrl.env.spreadsheet.case_check.verify_case` is the real one.
    """

    def __call__(
        self,
        input_path: Path,
        answer_path: Path,
        answer_position: str,
        calls: list[dict[str, Any]],
    ) -> list[str]: ...


@dataclass(frozen=True)
class Family:
    """A task family: ``build(rng, difficulty, n_cases) -> TaskSpec``."""

    name: str
    instruction_type: str
    difficulties: tuple[str, ...]
    summary: str
    build: Builder

    def generate(self, rng: random.Random, difficulty: str, n_cases: int) -> TaskSpec:
        spec = self.build(rng, difficulty, n_cases)
        spec.metadata.setdefault("family", self.name)
        return spec


def pick(rng: random.Random, options: list[str] | tuple[str, ...], **fields: object) -> str:
    """A random template from ``options`` filled with ``fields``."""
    return rng.choice(options).format(**fields)

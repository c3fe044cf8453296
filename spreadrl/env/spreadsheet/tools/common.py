"""Helpers shared by the tool modules: the strict argument base and cell-listing text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from openpyxl.worksheet.worksheet import Worksheet
from pydantic import BaseModel, ConfigDict, field_validator

from spreadrl.env.spreadsheet.workbook import CellRange, ToolError, column_letter, render_value


class ReplyError(ToolError):
    """A refused call whose whole observation is given (a preset that answers errors in JSON)."""

    def __init__(self, message: str, observation: str) -> None:
        super().__init__(message)
        self.observation = observation


class Args(BaseModel):
    """Arguments of a tool: unknown keys are an error the model is told about."""

    model_config = ConfigDict(extra="forbid")


class RangesArgs(Args):
    """A list of ranges; a single string is accepted as a one-item list."""

    ranges: list[str]

    @field_validator("ranges", mode="before")
    @classmethod
    def _one_string(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def check_ranges(ranges: list[str], limit: int) -> None:
    if not 1 <= len(ranges) <= limit:
        raise ToolError(f"ranges must hold 1 to {limit} ranges, got {len(ranges)}")


def check_cap(cell_range: CellRange, cap: int, tool: str) -> None:
    if cell_range.size > cap:
        raise ToolError(
            f"{cell_range.a1()} has {cell_range.size} cells, over the {cap}-cell limit of {tool}; "
            "split it into smaller ranges or use code_interpreter"
        )


def nonempty_cells(ws: Worksheet, cell_range: CellRange) -> list[tuple[int, int, Any]]:
    """(row, column, value) of the non-empty cells of ``cell_range``, row by row.

    Walks whichever is smaller: the range, or the cells the sheet actually holds.
    """
    cells = ws._cells
    out = []
    if cell_range.size <= len(cells):
        for r, c in cell_range.coordinates():
            cell = cells.get((r, c))
            if cell is not None and cell.value is not None:
                out.append((r, c, cell.value))
        return out
    for r, c in sorted(cells):
        if cell_range.min_row <= r <= cell_range.max_row and (
            cell_range.min_col <= c <= cell_range.max_col
        ):
            value = cells[(r, c)].value
            if value is not None:
                out.append((r, c, value))
    return out


def render_pages(
    blocks: Iterable[tuple[CellRange, list[tuple[int, int, Any]]]], cursor: int, page: int
) -> str:
    """Cells of several ranges as text, one line per row, cut to one page of ``page`` cells.

    ``cursor`` counts non-empty cells across all ranges; the footer says the next cursor.
    """
    blocks = list(blocks)
    total = sum(len(cells) for _, cells in blocks)
    if cursor < 0 or (cursor > 0 and cursor >= total):
        raise ToolError(f"cursor {cursor} is past the end ({total} non-empty cells); start at 0")
    lines: list[str] = []
    seen = 0
    end = cursor + page
    for cell_range, cells in blocks:
        before = seen
        seen += len(cells)
        first, last = max(cursor - before, 0), min(end - before, len(cells))
        if cells and (first >= len(cells) or last <= 0):
            continue  # this range's cells are on another page
        if not cells and not (cursor == 0 or cursor <= before < end):
            continue
        shape = f"{cell_range.rows} rows x {cell_range.cols} columns"
        lines.append(f"{cell_range.a1()} ({shape}, {len(cells)} non-empty cells)")
        if not cells:
            lines.append("(all empty)")
            continue
        row, parts = None, []
        for r, c, value in cells[first:last]:
            if r != row and parts:
                lines.append(" | ".join(parts))
                parts = []
            row = r
            parts.append(f"{column_letter(c)}{r}: {render_value(value)}")
        if parts:
            lines.append(" | ".join(parts))
    if total > end:
        lines.append(
            f"[page: non-empty cells {cursor + 1}-{end} of {total}; "
            f"call again with cursor={end} for the next page]"
        )
    elif cursor > 0:
        lines.append(f"[last page: non-empty cells {cursor + 1}-{total} of {total}]")
    return "\n".join(lines)

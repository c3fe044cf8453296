"""Read-only tools: inspect_range, list_sheets, find_cells."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from spreadrl.env.spreadsheet.tools.base import Tool, ToolContext
from spreadrl.env.spreadsheet.tools.common import (
    Args,
    RangesArgs,
    check_ranges,
    nonempty_cells,
    render_pages,
)
from spreadrl.env.spreadsheet.workbook import (
    CellRange,
    ToolError,
    column_letter,
    quote_sheet,
    render_value,
)


class InspectArgs(RangesArgs):
    ranges: list[str] = Field(
        description="1-20 A1 ranges, e.g. ['Sheet1!A1:D10', 'B:B']; no sheet prefix = first sheet."
    )
    mode: Literal["cells", "summary"] = Field(
        "cells", description="cells: every non-empty cell; summary: per-column types and stats."
    )
    cursor: int = Field(
        0, description="Non-empty-cell offset of the page to show (from a previous page's footer)."
    )
    max_cells: int | None = Field(None, description="Page size in cells (default 200).")


def inspect_range(ctx: ToolContext, args: InspectArgs) -> str:
    cfg = ctx.config
    check_ranges(args.ranges, cfg.max_ranges)
    page = args.max_cells or min(cfg.page_cells, cfg.max_page_cells)
    if not 1 <= page <= cfg.max_page_cells:
        raise ToolError(f"max_cells must be between 1 and {cfg.max_page_cells}, got {page}")
    book = ctx.book
    resolved = [book.parse_range(text, clip=True) for text in args.ranges]
    blocks = [(r, nonempty_cells(book.wb[r.sheet], r)) for r in resolved]
    if args.mode == "summary":
        return "\n".join(_summary(r, cells) for r, cells in blocks)
    return render_pages(blocks, args.cursor, page)


def _summary(cell_range: CellRange, cells: list[tuple[int, int, Any]]) -> str:
    formulas = sum(1 for _, _, v in cells if isinstance(v, str) and v.startswith("="))
    lines = [
        f"{cell_range.a1()}: {cell_range.rows} rows x {cell_range.cols} columns, "
        f"{len(cells)} non-empty cells ({formulas} formulas)"
    ]
    by_col: dict[int, list[tuple[int, Any]]] = {}
    for r, c, v in cells:
        by_col.setdefault(c, []).append((r, v))
    for col in sorted(by_col)[:50]:
        values = by_col[col]
        header = ""
        if values[0][0] == cell_range.min_row and isinstance(values[0][1], str) and len(values) > 1:
            header = f" {render_value(values[0][1], 40)}"
            values = values[1:]
        kinds = {"number": [], "text": [], "formula": [], "date": [], "bool": []}
        for _, v in values:
            if isinstance(v, bool):
                kinds["bool"].append(v)
            elif isinstance(v, int | float):
                kinds["number"].append(v)
            elif isinstance(v, str):
                kinds["formula" if v.startswith("=") else "text"].append(v)
            elif isinstance(v, dt.date | dt.datetime | dt.time):
                kinds["date"].append(v)
            else:
                kinds["text"].append(str(v))
        parts = [f"{len(vs)} {k}" for k, vs in kinds.items() if vs]
        nums = kinds["number"]
        if nums:
            parts.append(
                f"min {render_value(min(nums))}, max {render_value(max(nums))}, "
                f"sum {render_value(round(sum(nums), 6))}"
            )
        examples = list(dict.fromkeys(render_value(v, 30) for _, v in values))[:3]
        if examples:
            parts.append("e.g. " + ", ".join(examples))
        lines.append(f"  {column_letter(col)}{header}: " + "; ".join(parts))
    if len(by_col) > 50:
        lines.append(f"  [{len(by_col) - 50} more columns not shown]")
    return "\n".join(lines)


class ListSheetsArgs(Args):
    pass


def list_sheets(ctx: ToolContext, args: ListSheetsArgs) -> str:
    book = ctx.book
    lines = []
    for i, name in enumerate(book.wb.sheetnames, 1):
        rows, cols = book.dimensions(name)
        ws = book.wb[name]
        extent = (
            "empty"
            if rows == 0
            else f"{rows} rows x {cols} columns (A1:{column_letter(cols)}{rows})"
        )
        hidden = ", hidden" if ws.sheet_state != "visible" else ""
        lines.append(f"{i}. {quote_sheet(name)}: {extent}{hidden}")
    return "\n".join(lines)


class FindArgs(Args):
    query: str = Field(description="Text to look for (a substring of the cell's value or formula).")
    regex: bool = Field(False, description="Treat query as a Python regular expression.")
    sheet: str | None = Field(None, description="Search only this sheet (default: all sheets).")
    match_case: bool = Field(False, description="Case-sensitive match.")
    max_results: int = Field(50, description="Stop after this many matches.")


def find_cells(ctx: ToolContext, args: FindArgs) -> str:
    cap = ctx.config.max_find_results
    if not 1 <= args.max_results <= cap:
        raise ToolError(f"max_results must be between 1 and {cap}, got {args.max_results}")
    if not args.query:
        raise ToolError("query is empty; give the text (or regex) to look for")
    flags = 0 if args.match_case else re.IGNORECASE
    try:
        pattern = re.compile(args.query if args.regex else re.escape(args.query), flags)
    except re.error as exc:
        raise ToolError(
            f"query is not a valid regular expression ({exc}); or pass regex=false"
        ) from None
    book = ctx.book
    sheets = [book.sheet_name(args.sheet)] if args.sheet is not None else book.wb.sheetnames
    hits: list[str] = []
    more = False
    for name in sheets:
        cells = book.wb[name]._cells
        for r, c in sorted(cells):
            value = cells[(r, c)].value
            if value is None:
                continue
            text = value if isinstance(value, str) else render_value(value)
            if pattern.search(text):
                if len(hits) == args.max_results:
                    more = True
                    break
                hits.append(f"{quote_sheet(name)}!{column_letter(c)}{r}: {render_value(value)}")
        if more:
            break
    where = f"sheet {args.sheet!r}" if args.sheet is not None else "all sheets"
    if not hits:
        return f"no cells match {args.query!r} in {where}"
    head = f"{len(hits)} match{'es' if len(hits) != 1 else ''} for {args.query!r} in {where}:"
    tail = (
        [
            f"[stopped at max_results={args.max_results}; more matches exist: narrow the query, "
            "pass sheet, or raise max_results]"
        ]
        if more
        else []
    )
    return "\n".join([head, *hits, *tail])


def _reader(
    name: str, description: str, args: type[Args], run: Callable[[ToolContext, Any], str]
) -> Tool:
    return Tool(name, description, args, run, parallel_safe=True)  # these tools only read


TOOLS = [
    _reader(
        "inspect_range",
        "Show the contents of 1-20 ranges: every non-empty cell (formulas as written), or a "
        "per-column summary with mode='summary'. Long results are paginated: pass the cursor "
        "from the footer to see the next page.",
        InspectArgs,
        inspect_range,
    ),
    _reader(
        "list_sheets",
        "List the workbook's sheets with their used size.",
        ListSheetsArgs,
        list_sheets,
    ),
    _reader(
        "find_cells",
        "Find cells whose value or formula contains the query (or matches it as a regex).",
        FindArgs,
        find_cells,
    ),
]

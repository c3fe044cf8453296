"""Tools that run something outside the in-memory workbook: recalculate_and_read, code_interpreter."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from openpyxl.utils.cell import column_index_from_string, coordinate_from_string
from pydantic import Field

from spreadrl.archive_gate import WorkbookRefused
from spreadrl.env.sandbox import SandboxLimits, SandboxResult, run_python
from spreadrl.env.spreadsheet.recalc import get_engine
from spreadrl.env.spreadsheet.recalc.errors import is_error_value
from spreadrl.env.spreadsheet.recalc.locales import AUTO, DEFAULT_LOCALE, recalc_locale
from spreadrl.env.spreadsheet.tools.base import Tool, ToolContext
from spreadrl.env.spreadsheet.tools.common import Args, RangesArgs, check_ranges, render_pages
from spreadrl.env.spreadsheet.workbook import WORKBOOK_NAME, ErrorValue, ToolError
from spreadrl.errors import WorkbookError


class RecalcArgs(RangesArgs):
    ranges: list[str] = Field(description="1-20 ranges whose computed values to return.")
    cursor: int = Field(0, description="Non-empty-cell offset of the page to show.")
    max_cells: int | None = Field(None, description="Page size in cells (default 200).")


def evaluated(ctx: ToolContext) -> dict[str, dict[tuple[int, int], Any]]:
    """Computed values of the saved working copy, by sheet and (row, column).

    Both tool presets read recalculated values through this one function, so the
    engine runs once per workbook version (the result is kept in ``ctx.cache``).
    Raises ToolError when the engine cannot recalculate the workbook.
    """
    book = ctx.book
    cached = ctx.cache.get("recalc")
    if cached is not None and cached[0] == book.version:
        return cached[1]
    # the agent's view renders in the reward's locale (auto: en-US, the answer stays unseen)
    locale = DEFAULT_LOCALE if ctx.config.locale == AUTO else ctx.config.locale
    path = book.save()
    start = time.perf_counter()
    try:
        with recalc_locale(locale):
            engine = ctx.cache.get("engine") or get_engine(ctx.config.engine)
            ctx.cache["engine"] = engine
            raw = engine.evaluate(path)
    except WorkbookRefused:
        raise  # ends the episode (SpreadsheetEnv.step), not a note to the model
    except WorkbookError as exc:
        raise ToolError(f"the workbook could not be recalculated: {exc}") from None
    ctx.cache["recalc_s"] = ctx.cache.get("recalc_s", 0.0) + time.perf_counter() - start
    values: dict[str, dict[tuple[int, int], Any]] = {}
    for sheet, cells in raw.items():
        out = values[sheet] = {}
        for ref, value in cells.items():
            col, row = coordinate_from_string(ref)
            out[(row, column_index_from_string(col))] = value
    ctx.cache["recalc"] = (book.version, values)
    return values


def recalculate_and_read(ctx: ToolContext, args: RecalcArgs) -> str:
    cfg = ctx.config
    check_ranges(args.ranges, cfg.max_ranges)
    page = args.max_cells or min(cfg.page_cells, cfg.max_page_cells)
    if not 1 <= page <= cfg.max_page_cells:
        raise ToolError(f"max_cells must be between 1 and {cfg.max_page_cells}, got {page}")
    resolved = [ctx.book.parse_range(text, clip=True) for text in args.ranges]
    values = evaluated(ctx)
    blocks = []
    errors: dict[str, int] = {}
    for cell_range in resolved:
        sheet = values.get(cell_range.sheet, {})
        cells = []
        for r, c in cell_range.coordinates():
            value = sheet.get((r, c))
            if value is None or value == "":
                continue
            if is_error_value(value):
                errors[value] = errors.get(value, 0) + 1
                value = ErrorValue(value)
            cells.append((r, c, value))
        blocks.append((cell_range, cells))
    text = "recalculated; computed values:\n" + render_pages(blocks, args.cursor, page)
    if errors:
        listed = ", ".join(f"{k} x{v}" for k, v in sorted(errors.items()))
        text += f"\nnote: cells with formula errors in these ranges: {listed}"
    return text


class CodeArgs(Args):
    code: str = Field(
        description=(
            "Python source. It runs in a fresh sandboxed process in the episode folder; the "
            "working copy is 'workbook.xlsx' (openpyxl and pandas are available). Save the "
            "workbook to keep edits; print what you want to see."
        )
    )


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def code_interpreter(ctx: ToolContext, args: CodeArgs) -> str:
    if not args.code.strip():
        raise ToolError("code is empty; pass Python source to run")
    result, note = run_code(ctx, args.code)
    lines = []
    if result.error:
        lines.append(f"error: {result.error}")
    exit_code = "none (killed)" if result.exit_code is None else str(result.exit_code)
    lines.append(f"exit code: {exit_code}")
    if result.stdout:
        lines.append("stdout:\n" + result.stdout.rstrip("\n"))
    if result.stderr:
        lines.append("stderr:\n" + result.stderr.rstrip("\n"))
    if not result.stdout and not result.stderr:
        lines.append("(no output)")
    if note:
        lines.append(note)
    return "\n".join(lines)


def run_code(
    ctx: ToolContext, code: str, *, workbook: str = WORKBOOK_NAME
) -> tuple[SandboxResult, str | None]:
    """Run ``code`` sandboxed in the episode folder: both presets' code_interpreter.

    The code sees the working copy at ``workbook`` (relative to the folder:
    ``workbook.xlsx`` for spreadrl's tools, ``data/data.xlsx`` for
    Spreadsheet-RL's); when it saves that file, the working copy becomes its
    edits (or stays as it was when the file cannot be read). Returns the
    sandbox result and a note on the workbook (None when the file is unchanged).
    """
    book = ctx.book
    cfg = ctx.config
    path = book.save()
    seen = ctx.folder / workbook
    if seen != path:
        seen.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, seen)
    before = _stat(seen)
    limits = SandboxLimits(
        wall_time_s=cfg.code_wall_time_s,
        cpu_time_s=max(int(cfg.code_wall_time_s), 1),
        memory_mb=cfg.code_memory_mb,
    )
    result = run_python(code, ctx.folder, limits, mode=cfg.sandbox_mode)
    ctx.cache["sandbox_s"] = ctx.cache.get("sandbox_s", 0.0) + result.duration_s
    after = _stat(seen)
    if after == before:
        return result, None
    if after is None:
        book.saved_version = -1
        book.save()
        return result, f"note: {workbook} was removed; the previous version was restored"
    try:
        if seen != path:
            shutil.copyfile(seen, path)
        book.reload()
    except WorkbookError as exc:
        book.saved_version = -1
        book.save()
        if isinstance(exc, WorkbookRefused):
            raise  # the episode ends, scored 0 (SpreadsheetEnv.step)
        return result, f"note: {exc}; the previous version was restored"
    return result, f"{workbook} changed; the working copy now holds your edits"


TOOLS = [
    Tool(
        "recalculate_and_read",
        "Recalculate every formula of the workbook and return the computed values of 1-20 "
        "ranges (paginated like inspect_range).",
        RecalcArgs,
        recalculate_and_read,
    ),
    Tool(
        "code_interpreter",
        "Run Python in a sandbox inside the episode folder, where the working copy is "
        "'workbook.xlsx'; edits saved to that file become the working copy.",
        CodeArgs,
        code_interpreter,
    ),
]

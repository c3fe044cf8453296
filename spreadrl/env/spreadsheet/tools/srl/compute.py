"""The spreadsheet-rl tools that run something: recalculate_and_read, code_interpreter."""

from __future__ import annotations

from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.compute import evaluated, run_code
from spreadrl.env.spreadsheet.tools.srl.address import qualify
from spreadrl.env.spreadsheet.tools.srl.arguments import SrlArgs
from spreadrl.env.spreadsheet.tools.srl.read import MAX_RANGES
from spreadrl.env.spreadsheet.tools.srl.replies import (
    MAX_RESPONSE_CHARS,
    WORKBOOK,
    SrlError,
    fit,
    jsonable,
)
from spreadrl.env.spreadsheet.workbook import ToolError, column_letter

RECALC_MATRIX_CELLS = 100  # ranges up to this size come back as a matrix, larger as samples
RECALC_SAMPLES = 50
CODE_WORKBOOK = "data/data.xlsx"  # where the code interpreter finds it


def recalculate_and_read(ctx: ToolContext, a: SrlArgs) -> str:
    if not a.cell_ranges:
        raise SrlError("invalid_arguments", "cell_ranges is empty; pass A1 ranges to read.")
    if len(a.cell_ranges) > MAX_RANGES:
        raise SrlError("too_many_ranges", f"at most {MAX_RANGES} ranges per call.")
    targets = [ctx.book.parse_range(qualify(ctx, t, None), clip=True) for t in a.cell_ranges]
    try:
        values = evaluated(ctx)
    except ToolError as exc:
        raise SrlError("recalc_failed", str(exc)) from None
    ranges = []
    for target in targets:
        sheet = values.get(target.sheet, {})
        if target.size <= RECALC_MATRIX_CELLS:
            matrix = [
                [jsonable(sheet.get((r, c))) for c in range(target.min_col, target.max_col + 1)]
                for r in range(target.min_row, target.max_row + 1)
            ]
            ranges.append({"range": target.a1(), "values": matrix})
            continue
        cells = [
            (r, c, sheet[(r, c)])
            for r, c in target.coordinates()
            if sheet.get((r, c)) not in (None, "")
        ]
        ranges.append({
            "range": target.a1(),
            "non_empty_cells": len(cells),
            "samples": [
                {"address": f"{column_letter(c)}{r}", "value": jsonable(v)}
                for r, c, v in cells[:RECALC_SAMPLES]
            ],
        })  # fmt: skip
    payload = {
        "status": "success",
        "file": WORKBOOK,
        "updated": True,
        "values_source": "recalculated",
        "ranges": ranges,
        "truncated": False,
    }
    return fit(payload, MAX_RESPONSE_CHARS, ("samples", "values"))


def code_interpreter(ctx: ToolContext, a: SrlArgs) -> str:
    """Upstream's sandbox answer: ``Code executed successfully:`` and stdout, or the failure."""
    result, _ = run_code(ctx, a.code, workbook=CODE_WORKBOOK)
    if result.exit_code == 0 and not result.error and not result.timed_out:
        return "Code executed successfully:\n" + result.stdout
    if result.timed_out:
        status = "timeout"
    elif result.error and result.exit_code is None:
        status = "sandbox_error"
    else:
        status = "runtime_error"
    code = f" (exit_code={result.exit_code})" if result.exit_code is not None else ""
    details = (result.stdout + result.stderr) or (result.error or "")
    return f"Code execution failed with status: {status}{code}" + (
        f"\n{details}" if details else ""
    )

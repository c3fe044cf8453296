"""Generation-time check of a synthesized case against the real answer checker.

Every case must satisfy three things, checked with
:func:`spreadrl.env.spreadsheet.checker.check_workbook` (the reward's own view): the answer
passes against itself, the untouched input fails (the task is not already
solved), and the reference solution applied to the input passes. The gym
replays solutions for real; here a small openpyxl applier of the subset the
families emit (write_range, manage_sheet add, delete_rows) stands in for it.

It lives in env, not beside the synthesizer in data, because it grades with
env's checker and replays delete_rows with env's reference shifting: data never
imports env. :func:`verify_case` fits :class:`spreadrl.data.synth.base.CaseCheck`;
the caller (``spreadrl data synth``, the tests) hands it to
:func:`spreadrl.data.synth.synthesize`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.utils.cell import range_boundaries

from spreadrl.archive_gate import check_archive
from spreadrl.env.spreadsheet.checker import check_workbook
from spreadrl.env.spreadsheet.refshift import delete_and_shift


def _split_range(text: str, default: str) -> tuple[str, str]:
    if "!" not in text:
        return default, text
    sheet, cell_range = text.rsplit("!", 1)
    if sheet.startswith("'") and sheet.endswith("'"):
        sheet = sheet[1:-1].replace("''", "'")
    return sheet, cell_range


def apply_calls(input_path: Path, calls: list[dict[str, Any]], output_path: Path) -> None:
    """Apply reference-solution calls to a copy of ``input_path`` with openpyxl."""
    check_archive(input_path)
    wb = openpyxl.load_workbook(input_path)
    for call in calls:
        name, args = call["name"], call.get("arguments", {})
        if name == "write_range":
            sheet, cell_range = _split_range(args["range"], wb.sheetnames[0])
            ws = wb[sheet]
            min_col, min_row, max_col, max_row = range_boundaries(cell_range)
            values = args["values"]
            if not isinstance(values, list):
                values = [[values]]
            elif values and not isinstance(values[0], list):
                values = [values]
            for i in range(max_row - min_row + 1):
                row = values[i] if len(values) > 1 else values[0]
                for j in range(max_col - min_col + 1):
                    value = row[j] if len(row) > 1 else row[0]
                    if value is None:
                        continue
                    # ws.cell(value=None) would leave the cell as it is: assign instead
                    cell = ws.cell(row=min_row + i, column=min_col + j)
                    cell.value = None if value == "" else value
                    if value == "":  # a cleared date cell would read back as time 00:00
                        cell.number_format = "General"
        elif name == "manage_sheet" and args.get("action") == "add":
            wb.create_sheet(args.get("sheet") or args["new_name"])
        elif name == "delete_rows":
            ws = wb[args.get("sheet") or wb.sheetnames[0]]
            delete_and_shift(wb, ws, "row", int(args["start_row"]), int(args.get("count", 1)))
        else:
            raise ValueError(f"the generation-time applier does not support {name!r} {args}")
    wb.save(output_path)


def verify_case(
    input_path: Path, answer_path: Path, answer_position: str, calls: list[dict[str, Any]]
) -> list[str]:
    """Problems with one case (empty when it is sound)."""
    problems = []
    if not check_workbook(answer_path, answer_path, answer_position).passed:
        problems.append("the answer does not pass against itself")
    if check_workbook(input_path, answer_path, answer_position).passed:
        problems.append("the input already passes (nothing to do)")
    with tempfile.TemporaryDirectory(prefix="spreadrl-verify-") as tmp:
        out = Path(tmp) / "output.xlsx"
        apply_calls(input_path, calls, out)
        result = check_workbook(out, answer_path, answer_position)
        if not result.passed:
            shown = "; ".join(
                f"{m.sheet}!{m.cell}: expected {m.expected!r}, got {m.actual!r} ({m.reason})"
                for m in result.mismatches[:3]
            )
            problems.append(f"the reference solution fails: {shown}")
    return problems

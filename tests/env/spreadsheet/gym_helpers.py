"""Small in-code workbooks and tasks for the gym's tool and episode tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openpyxl

from spreadrl.data.task import Task, TaskCase
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.tools import TOOLS, ToolContext, ToolError
from spreadrl.env.spreadsheet.workbook import WorkingCopy


def sales_book(path: Path) -> Path:
    """Sheet1: a header and 5 rows of (Region, Units, Price); Notes: two text cells."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws.append(["Region", "Units", "Price"])
    for row in [
        ["North", 10, 2.5],
        ["South", 4, 3.0],
        ["East", 7, 1.5],
        ["West", 1, 9.0],
        ["North", 3, 2.0],
    ]:
        ws.append(row)
    notes = wb.create_sheet("My Notes")
    notes["A1"] = "apple pie"
    notes["B2"] = "Apple juice"
    wb.save(path)
    return path


def make_ctx(
    tmp_path: Path, config: EnvConfig | None = None, book: Path | None = None
) -> ToolContext:
    folder = tmp_path / "episode"
    folder.mkdir(exist_ok=True)
    source = book or sales_book(tmp_path / "input.xlsx")
    return ToolContext(WorkingCopy(folder, source), config or EnvConfig(), folder)


def call(ctx: ToolContext, name: str, **arguments: Any) -> str:
    return TOOLS[name].call(ctx, arguments)


def error_of(ctx: ToolContext, name: str, **arguments: Any) -> str:
    try:
        text = TOOLS[name].call(ctx, arguments)
    except ToolError as exc:
        return str(exc)
    raise AssertionError(f"{name}({arguments}) succeeded: {text}")


def value(ctx: ToolContext, ref: str, sheet: str = "Sheet1") -> Any:
    return ctx.book.wb[sheet][ref].value


def make_task(tmp_path: Path, answer_edit: Any, answer_position: str = "D2:D6") -> Task:
    """A task on sales_book whose answer is the input edited by ``answer_edit(ws)``."""
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    inp = sales_book(folder / "1_t1_input.xlsx")
    wb = openpyxl.load_workbook(inp)
    answer_edit(wb["Sheet1"])
    wb.save(folder / "1_t1_answer.xlsx")
    case = TaskCase(1, inp, folder / "1_t1_answer.xlsx")
    return Task(
        id="t1",
        instruction="Put Units*Price in D2:D6.",
        instruction_type="Cell-Level Manipulation",
        answer_position=answer_position,
        cases=(case,),
        folder=folder,
    )


def revenue_answer(ws: Any) -> None:
    for r in range(2, 7):
        ws.cell(r, 4).value = ws.cell(r, 2).value * ws.cell(r, 3).value

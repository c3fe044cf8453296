"""What a task set holds: counts by type, family, source, difficulty; cases; sizes; cells.

:func:`summarize_tasks` returns plain JSON-ready data (``spreadrl data info
--json``); the CLI draws it as tables (``spreadrl.cli.data_info``). Counting the
non-empty cells of every input workbook opens each one, so it is opt-in
(``count_cells``); answer cells come from the answer_position alone.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from spreadrl.archive_gate import check_archive
from spreadrl.cells import AnswerPositionError, parse_answer_position
from spreadrl.data.task import Task, TaskSet

log = logging.getLogger(__name__)


def _answer_cells(task: Task) -> int | None:
    """Cells the checker compares, or None when a column/row-only range makes it data-dependent."""
    from openpyxl.utils.cell import range_boundaries

    total = 0
    try:
        references = parse_answer_position(task.answer_position)
    except AnswerPositionError:
        return None
    for _, cell_range in references:
        min_col, min_row, max_col, max_row = range_boundaries(cell_range)
        if min_col is None or min_row is None or max_col is None or max_row is None:
            return None
        total += (max_row - min_row + 1) * (max_col - min_col + 1)
    return total


def _input_cells(task: Task) -> int:
    """Non-empty cells over every sheet of every case's input workbook."""
    from openpyxl import load_workbook

    total = 0
    for case in task.cases:
        check_archive(case.input_path)
        book = load_workbook(case.input_path, read_only=True, data_only=False)
        try:
            for sheet in book.worksheets:
                for row in sheet.iter_rows(values_only=True):
                    total += sum(1 for value in row if value is not None and value != "")
        finally:
            book.close()
    return total


def _sorted(counter: Counter) -> dict[str, int]:
    return {str(key): count for key, count in sorted(counter.items(), key=lambda kv: str(kv[0]))}


def summarize_tasks(task_set: TaskSet, *, count_cells: bool = False) -> dict[str, Any]:
    """A JSON-ready summary of ``task_set`` (problems included when it was loaded with skip_bad)."""
    by_type: Counter = Counter()
    by_family: Counter = Counter()
    by_source: Counter = Counter()
    by_difficulty: Counter = Counter()
    cases_per_task: Counter = Counter()
    input_bytes = answer_bytes = 0
    answer_cells = 0
    unbounded = 0
    input_cells = 0
    for task in task_set:
        by_type[task.instruction_type] += 1
        by_family[task.family or "-"] += 1
        by_source[task.source or "-"] += 1
        by_difficulty[task.difficulty or "-"] += 1
        cases_per_task[len(task.cases)] += 1
        for case in task.cases:
            input_bytes += case.input_path.stat().st_size
            answer_bytes += case.answer_path.stat().st_size
        cells = _answer_cells(task)
        if cells is None:
            unbounded += 1
        else:
            answer_cells += cells * len(task.cases)
        if count_cells:
            input_cells += _input_cells(task)
    summary: dict[str, Any] = {
        "root": str(task_set.root),
        "tasks": len(task_set),
        "cases": sum(len(task.cases) for task in task_set),
        "by_instruction_type": _sorted(by_type),
        "by_family": _sorted(by_family),
        "by_source": _sorted(by_source),
        "by_difficulty": _sorted(by_difficulty),
        "cases_per_task": _sorted(cases_per_task),
        "workbook_bytes": {
            "input": input_bytes,
            "answer": answer_bytes,
            "total": input_bytes + answer_bytes,
        },
        "answer_cells": answer_cells,
        "tasks_with_column_ranges": unbounded,
        "problems": [{"task_id": p.task_id, "message": p.message} for p in task_set.problems],
    }
    if count_cells:
        summary["input_cells"] = input_cells
    return summary

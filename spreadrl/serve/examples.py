"""Built-in example tasks for the serve page, so it can be tried with no file of one's own.

The first cases of the built-in ``demo-test`` split (easy aggregate tasks, built
deterministically on first use): their instruction and input workbook.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from spreadrl.errors import SpreadrlError

SPLIT = "demo-test"
COUNT = 8


@cache
def _examples() -> dict[str, tuple[str, Path, str]]:
    from spreadrl.data.builtin import builtin_tasks

    tasks = builtin_tasks(SPLIT).tasks[:COUNT]
    return {t.id: (t.instruction, t.case(1).input_path, t.family or "") for t in tasks}


def example_list() -> list[dict[str, Any]]:
    """Each example's id, instruction and family, for the page's picker."""
    return [
        {"id": tid, "instruction": instruction, "family": family}
        for tid, (instruction, _, family) in _examples().items()
    ]


def example_workbook(task_id: str) -> Path:
    """The input workbook of example ``task_id``.

    Raises:
        SpreadrlError: no example of that id (the id is looked up, never joined to a path).
    """
    found = _examples().get(task_id)
    if found is None:
        raise SpreadrlError(f"no example task {task_id!r}; GET /v1/examples lists them")
    return found[1]

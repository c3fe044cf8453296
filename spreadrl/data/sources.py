"""Resolve a task-set argument.

- a folder in the native (SpreadsheetBench) layout;
- ``builtin:<split>``: the built-in spreadsheet suite (train, test, demo-train, demo-test);
- ``builtin-code:<split>``: the built-in math/code problems of the GRPO-TCR environment;
- a ``.jsonl`` file of math/code problems ({id, source, problem, answer | tests}).
"""

from __future__ import annotations

from pathlib import Path

from spreadrl.data import builtin, code_tasks
from spreadrl.data.task import TaskSet, load_tasks

BUILTIN_PREFIX = "builtin:"
BUILTIN_CODE_PREFIX = "builtin-code:"


def resolve_tasks(spec: str | Path, *, skip_bad: bool = False) -> TaskSet:
    """``builtin:test`` builds/reuses the built-in suite; anything else is a folder."""
    text = str(spec)
    if text.startswith(BUILTIN_CODE_PREFIX):
        return code_tasks.builtin_code_tasks(text[len(BUILTIN_CODE_PREFIX) :] or "train")
    if text.endswith(".jsonl"):
        return code_tasks.load_problem_jsonl(Path(text), skip_bad=skip_bad)
    if text.startswith(BUILTIN_PREFIX):
        return builtin.builtin_tasks(text[len(BUILTIN_PREFIX) :] or "train")
    return load_tasks(Path(text), skip_bad=skip_bad)

"""Resolve a task-set argument.

- a folder in the native (SpreadsheetBench) layout;
- ``builtin:<split>``: the built-in spreadsheet suite (train, test, demo-train, demo-test);
- ``builtin-code:<split>``: the built-in math/code problems of the GRPO-TCR environment;
- a ``.jsonl`` file of math/code problems ({id, source, problem, answer | tests});
- ``openenv:<n>``: n episodes of an OpenEnv server that brings its own tasks
  (``env.kind openenv``): no spreadrl task set, see :func:`server_episodes`.
"""

from __future__ import annotations

from pathlib import Path

from spreadrl.data import builtin, code_tasks
from spreadrl.data.task import Task, TaskCase, TaskSet, load_tasks
from spreadrl.errors import TaskFormatError

BUILTIN_PREFIX = "builtin:"
BUILTIN_CODE_PREFIX = "builtin-code:"
OPENENV_PREFIX = "openenv:"
OPENENV_SOURCE = "openenv"
"""The ``source`` of :func:`server_episodes`' tasks: the server picks the task at reset."""


def resolve_tasks(spec: str | Path, *, skip_bad: bool = False) -> TaskSet:
    """``builtin:test`` builds/reuses the built-in suite; anything else is a folder."""
    text = str(spec)
    if text.startswith(BUILTIN_CODE_PREFIX):
        return code_tasks.builtin_code_tasks(text[len(BUILTIN_CODE_PREFIX) :] or "train")
    if text.endswith(".jsonl"):
        return code_tasks.load_problem_jsonl(Path(text), skip_bad=skip_bad)
    if text.startswith(OPENENV_PREFIX):
        return server_episodes(text[len(OPENENV_PREFIX) :])
    return spreadsheet_tasks(text, skip_bad=skip_bad)


def spreadsheet_tasks(spec: str | Path, *, skip_bad: bool = False) -> TaskSet:
    """A spreadsheet task set: a folder or ``builtin:<split>`` (what ``data info``,
    ``filter``, ``split``, ``check`` and ``env replay`` read, which open workbooks); the
    other kinds of :func:`resolve_tasks` are refused in one line."""
    text = str(spec)
    if text.startswith(BUILTIN_PREFIX):
        return builtin.builtin_tasks(text[len(BUILTIN_PREFIX) :] or "train")
    for prefix in (BUILTIN_CODE_PREFIX, OPENENV_PREFIX):
        if text.startswith(prefix):
            raise TaskFormatError(
                f"{text}: not a spreadsheet task set; give a task folder or {BUILTIN_PREFIX}<split>"
            )
    return load_tasks(Path(text), skip_bad=skip_bad)


def server_episodes(count: str | int) -> TaskSet:
    """``openenv:<n>``: n episodes whose task the OpenEnv server brings (its reset
    observation's text is the prompt, its reward the outcome). Episode i is reset with
    ``seed=i`` and nothing else, so a server that draws its tasks from the seed gives n
    different ones; the tasks here carry no workbook and no instruction."""
    text = str(count).strip()
    if not text.isdigit() or int(text) < 1:
        raise TaskFormatError(
            f"{OPENENV_PREFIX}{text}: give the number of episodes, e.g. {OPENENV_PREFIX}64"
        )
    root = Path(f"<{OPENENV_SOURCE}>")
    none = TaskCase(1, root, root)
    tasks = [
        Task(
            f"{OPENENV_SOURCE}-{i:05d}",
            "",
            OPENENV_SOURCE,
            "",
            (none,),
            root,
            source=OPENENV_SOURCE,
            metadata={"seed": i},
        )
        for i in range(int(text))
    ]
    return TaskSet(root, tasks)

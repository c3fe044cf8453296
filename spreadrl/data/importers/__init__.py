"""Importers: local copies of SpreadsheetBench and Spreadsheet-RL -> the native layout.

Both write ``out/dataset.json`` plus ``out/<id>/{n}_{id}_input.xlsx`` /
``{n}_{id}_answer.xlsx`` and return an :class:`ImportReport`. They never lose
data: a non-empty ``out`` is refused unless ``overwrite``, and the new set
replaces it only once every task was written.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from spreadrl.data.importers.common import ImportReport, StagedOutput, check_paths
from spreadrl.data.importers.spreadsheet_rl import import_spreadsheet_rl
from spreadrl.data.importers.spreadsheetbench import import_spreadsheetbench
from spreadrl.data.task import TaskCase, TaskSet
from spreadrl.run_folder import FolderCheck

__all__ = ["ImportReport", "copy_tasks", "import_spreadsheet_rl", "import_spreadsheetbench"]


def copy_tasks(
    task_set: TaskSet,
    out: Path,
    *,
    overwrite: bool = False,
    written_by: FolderCheck | None = None,
) -> TaskSet:
    """Copy a loaded task set (e.g. the built-in suite) to ``out`` in the native layout.

    ``written_by`` says what in an existing ``out`` the calling command did not
    write (default: anything but a task set); such an ``out`` is never replaced.
    """
    out = Path(out)
    check_paths(task_set.root, out, overwrite=overwrite, written_by=written_by)
    with StagedOutput(out) as staged:
        tasks = []
        for task in task_set:
            folder = staged.path / task.id
            folder.mkdir()
            cases = []
            for case in task.cases:
                paths = [case.input_path, case.answer_path, case.solution_path]
                names = ("input.xlsx", "answer.xlsx", "solution.json")
                copied = []
                for path, name in zip(paths, names, strict=True):
                    if path is None:
                        copied.append(None)
                        continue
                    dest = folder / f"{case.index}_{task.id}_{name}"
                    shutil.copyfile(path, dest)
                    copied.append(dest)
                cases.append(TaskCase(case.index, copied[0], copied[1], copied[2]))
            tasks.append(replace(task, cases=tuple(cases), folder=folder))
        return staged.commit(tasks)

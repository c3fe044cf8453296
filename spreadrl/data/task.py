"""The task format every part of spreadrl shares.

On disk the native layout is SpreadsheetBench's::

    DIR/dataset.json                 [{id, instruction, spreadsheet_path,
                                       instruction_type, answer_position, ...}]
    DIR/<spreadsheet_path>/{n}_{id}_input.xlsx
    DIR/<spreadsheet_path>/{n}_{id}_answer.xlsx
    DIR/<spreadsheet_path>/{n}_{id}_solution.json   (optional reference solution)

The Verified naming (``{n}_{id}_init.xlsx`` / ``{n}_{id}_golden.xlsx``) is read
too. spreadrl's own extra fields (source, family, difficulty, metadata) live in
the same dataset.json entries, so SpreadsheetBench tools still read our sets.

A reference solution is a scripted episode in the trajectory format of
``spreadrl env replay``: ``{"task": id, "case": n, "calls": [{"name", "arguments"}]}``.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spreadrl.archive_gate import WorkbookRefused, check_archive
from spreadrl.cells import AnswerPositionError, parse_answer_position
from spreadrl.data.jsontypes import JSONValue
from spreadrl.errors import TaskFormatError

CELL_LEVEL = "Cell-Level Manipulation"
SHEET_LEVEL = "Sheet-Level Manipulation"
INSTRUCTION_TYPES = (CELL_LEVEL, SHEET_LEVEL)

_REQUIRED_FIELDS = ("id", "instruction", "instruction_type", "answer_position")
_CASE_RE = re.compile(r"^(\d+)_(.+)_(input|answer|init|golden|solution)\.(xlsx|json)$")


@dataclass(frozen=True)
class TaskCase:
    """One test case: the workbook the agent starts from and the expected result."""

    index: int
    input_path: Path
    answer_path: Path
    solution_path: Path | None = None

    def load_solution(self) -> list[dict[str, Any]] | None:
        """The reference solution's tool calls, or None when the case has none."""
        if self.solution_path is None:
            return None
        try:
            data = json.loads(self.solution_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TaskFormatError(
                f"{self.solution_path}: unreadable reference solution ({exc})"
            ) from exc
        calls = data.get("calls") if isinstance(data, dict) else None
        if not isinstance(calls, list):
            raise TaskFormatError(f"{self.solution_path}: expected an object with a 'calls' list")
        return calls


@dataclass(frozen=True)
class Task:
    """A spreadsheet task with one or more test cases."""

    id: str
    instruction: str
    instruction_type: str
    answer_position: str
    cases: tuple[TaskCase, ...]
    folder: Path
    source: str = "spreadsheetbench"
    family: str | None = None
    difficulty: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def case(self, index: int) -> TaskCase:
        for case in self.cases:
            if case.index == index:
                return case
        have = ", ".join(str(c.index) for c in self.cases)
        raise TaskFormatError(f"task {self.id!r} has no case {index} (cases: {have})")

    def output_name(self, index: int) -> str:
        """SpreadsheetBench's name for a solver's output of case ``index``."""
        return f"{index}_{self.id}_output.xlsx"

    def to_json(self, root: Path) -> dict[str, Any]:
        """The dataset.json entry for this task, with paths relative to ``root``."""
        entry: dict[str, Any] = {
            "id": self.id,
            "instruction": self.instruction,
            "spreadsheet_path": _relative(self.folder, root),
            "instruction_type": self.instruction_type,
            "answer_position": self.answer_position,
            "source": self.source,
        }
        if self.family:
            entry["family"] = self.family
        if self.difficulty:
            entry["difficulty"] = self.difficulty
        if self.metadata:
            entry["metadata"] = dict(self.metadata)
        return entry


class EmptyAnswerPositionError(TaskFormatError):
    """An answer_position that covers no cell of an answer workbook: checking it would
    compare nothing, so any output would pass."""


@dataclass(frozen=True)
class TaskProblem:
    """Why one task of a set could not be loaded (``kind``: what a filter report counts)."""

    task_id: str
    message: str
    kind: str = "load"


@dataclass
class TaskSet:
    """Tasks loaded from one directory, plus the ones skipped as broken."""

    root: Path
    tasks: list[Task]
    problems: list[TaskProblem] = field(default_factory=list)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise TaskFormatError(f"{self.root}: no task with id {task_id!r}")

    def episodes(self) -> list[tuple[Task, int]]:
        """Every (task, case index) pair, in a stable order."""
        return [(task, case.index) for task in self.tasks for case in task.cases]

    def episode_keys(self) -> list[tuple[str, int]]:
        """Every (task id, case index) pair, in :meth:`episodes`' order: what a run's prompt
        order shuffles and its checkpoints record."""
        return [(task.id, case.index) for task in self.tasks for case in task.cases]


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def find_cases(folder: Path, task_id: str) -> tuple[TaskCase, ...]:
    """The numbered test cases of ``task_id`` in ``folder`` (both namings)."""
    inputs: dict[int, Path] = {}
    answers: dict[int, Path] = {}
    solutions: dict[int, Path] = {}
    if not folder.is_dir():
        raise TaskFormatError(f"task {task_id!r}: folder {folder} does not exist")
    for path in folder.iterdir():
        match = _CASE_RE.match(path.name)
        if not match or match.group(2) != task_id:
            continue
        index, kind = int(match.group(1)), match.group(3)
        if kind in ("input", "init"):
            inputs[index] = path
        elif kind in ("answer", "golden"):
            answers[index] = path
        elif kind == "solution":
            solutions[index] = path
    if not inputs:
        raise TaskFormatError(
            f"task {task_id!r}: no input workbook in {folder} "
            f"(expected files like 1_{task_id}_input.xlsx or 1_{task_id}_init.xlsx)"
        )
    cases = []
    for index in sorted(inputs):
        if index not in answers:
            raise TaskFormatError(
                f"task {task_id!r}: case {index} has {inputs[index].name} but no answer workbook "
                f"({index}_{task_id}_answer.xlsx) in {folder}"
            )
        cases.append(TaskCase(index, inputs[index], answers[index], solutions.get(index)))
    return tuple(cases)


def _parse_entry(entry: JSONValue, position: int, root: Path) -> Task:
    if not isinstance(entry, dict):
        raise TaskFormatError(f"{root / 'dataset.json'}: entry {position} is not an object")
    missing = [name for name in _REQUIRED_FIELDS if name not in entry]
    label = entry.get("id", f"#{position}")
    if missing:
        raise TaskFormatError(
            f"{root / 'dataset.json'}: task {label!r} lacks field(s) {', '.join(missing)}"
        )
    task_id = str(entry["id"])
    instruction_type = str(entry["instruction_type"])
    if instruction_type not in INSTRUCTION_TYPES:
        raise TaskFormatError(
            f"{root / 'dataset.json'}: task {task_id!r} has instruction_type {instruction_type!r}; "
            f"expected one of {', '.join(INSTRUCTION_TYPES)}"
        )
    folder = root / str(entry.get("spreadsheet_path") or task_id)
    return Task(
        id=task_id,
        instruction=str(entry["instruction"]),
        instruction_type=instruction_type,
        answer_position=str(entry["answer_position"]),
        cases=find_cases(folder, task_id),
        folder=folder,
        source=str(entry.get("source", "spreadsheetbench")),
        family=entry.get("family"),
        difficulty=entry.get("difficulty"),
        metadata=dict(entry.get("metadata") or {}),
    )


def _check_workbooks(task: Task) -> None:
    """Cheap readability check: every .xlsx must at least be a zip archive."""
    for case in task.cases:
        for path in (case.input_path, case.answer_path):
            if not zipfile.is_zipfile(path):
                raise TaskFormatError(
                    f"task {task.id!r}: {path} is not a readable .xlsx workbook (not a zip archive)"
                )


_SHEET_TAG = re.compile(r"<(?:\w+:)?sheet\b[^>]*>")
_RELATIONSHIP = re.compile(r"<(?:\w+:)?Relationship\b[^>]*>")
_CELL_TAG = re.compile(rb"<(?:\w+:)?c\b")


def _attribute(tag: str, name: str) -> str | None:
    match = re.search(r"\b" + name + r'="([^"]*)"', tag)
    return match.group(1) if match else None


def _sheet_parts(archive: zipfile.ZipFile) -> list[tuple[str, str]]:
    """(sheet name, zip part) in workbook order, read from the XML without a workbook parse."""
    import html

    workbook = archive.read("xl/workbook.xml").decode("utf-8", "replace")
    rels = archive.read("xl/_rels/workbook.xml.rels").decode("utf-8", "replace")
    targets = {}
    for tag in _RELATIONSHIP.findall(rels):
        rid, target = _attribute(tag, "Id"), _attribute(tag, "Target")
        if rid and target:
            targets[rid] = target.lstrip("/") if target.startswith("/") else "xl/" + target
    parts = []
    for tag in _SHEET_TAG.findall(workbook):
        name = _attribute(tag, "name")
        rid = _attribute(tag, "r:id")
        if rid is None:  # another prefix for the relationships namespace
            other = re.search(r'\b\w+:id="([^"]*)"', tag)
            rid = other.group(1) if other else None
        if name is not None:
            parts.append((html.unescape(name), targets.get(rid or "", "")))
    return parts


def _find_sheet(parts: list[tuple[str, str]], name: str) -> tuple[str, str] | None:
    """The sheet called ``name``, exactly, else case-insensitively (as the checker finds it)."""
    for part in parts:
        if part[0] == name:
            return part
    folded = name.strip().casefold()
    for part in parts:
        if part[0].strip().casefold() == folded:
            return part
    return None


def empty_positions(answer_path: Path, answer_position: str) -> list[str]:
    """The references of ``answer_position`` that cover no cell of ``answer_path``.

    A reference covers no cell when its sheet is not in the workbook, or when it is
    a column-only range (``A:G``, bounded by the sheet's used rows) on a sheet with
    no cell at all. The checker would compare nothing there, so any output would pass.
    An unreadable workbook is left to the other checks (returns []).
    """
    try:
        check_archive(answer_path)
        with zipfile.ZipFile(answer_path) as archive:
            parts = _sheet_parts(archive)
            empty = []
            for sheet, cell_range in parse_answer_position(answer_position):
                found = parts[0] if sheet is None and parts else _find_sheet(parts, sheet or "")
                label = f"{sheet}!{cell_range}" if sheet is not None else cell_range
                if found is None:
                    empty.append(f"{label} (no sheet {sheet!r})")
                    continue
                if re.fullmatch(r"[A-Z]+:[A-Z]+", cell_range):
                    try:
                        data = archive.read(found[1])
                    except KeyError:
                        data = b""
                    if not _CELL_TAG.search(data):
                        empty.append(f"{label} (sheet {found[0]!r} has no cells)")
            return empty
    except (OSError, KeyError, zipfile.BadZipFile, WorkbookRefused):
        return []


def _check_positions(task: Task) -> None:
    for case in task.cases:
        empty = empty_positions(case.answer_path, task.answer_position)
        if empty:
            raise EmptyAnswerPositionError(
                f"task {task.id!r}: answer_position {task.answer_position!r} covers no cell of "
                f"{case.answer_path.name}: {'; '.join(empty)} (checking it would compare nothing)"
            )


def load_tasks(root: str | Path, *, skip_bad: bool = False, validate: bool = True) -> TaskSet:
    """Load a task set in the native layout.

    With ``skip_bad`` a broken task is recorded in ``TaskSet.problems`` instead of
    stopping the load. ``validate`` also checks that every answer_position parses
    and every workbook is at least a zip archive (cheap; it catches the messy
    hand-written positions and truncated downloads early), and that the position
    covers at least one cell of every answer workbook (:func:`empty_positions`):
    a check that compares nothing would pass any output.
    """
    root = Path(root)
    index_path = root / "dataset.json"
    if not index_path.is_file():
        if root.is_file():  # a synth --out there would fail too: name the folder to give
            hint = f"; give its folder, {root.parent}" if root.name == "dataset.json" else ""
            raise TaskFormatError(f"{root}: a file, not a task set folder{hint}")
        if root.is_dir() and any(root.iterdir()):  # a command with --out here would refuse it
            raise TaskFormatError(
                f"{root}: no dataset.json, so no task set (a stopped command leaves none); "
                "create one in a new folder with `spreadrl data synth --out NEW_FOLDER` or "
                "`spreadrl data import`"
            )
        raise TaskFormatError(
            f"{root}: no dataset.json (is this a task folder? create one with "
            f"`spreadrl data synth --out {root}` or `spreadrl data import`)"
        )
    try:
        entries = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFormatError(f"{index_path}: unreadable dataset.json ({exc})") from exc
    if not isinstance(entries, list):
        raise TaskFormatError(f"{index_path}: expected a JSON list of tasks")
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        try:
            task = _parse_entry(entry, position, root)
            if task.id in seen:
                raise TaskFormatError(f"{index_path}: duplicate task id {task.id!r}")
            if validate:
                try:
                    parse_answer_position(task.answer_position)
                except AnswerPositionError as exc:
                    raise TaskFormatError(
                        f"{index_path}: task {task.id!r} has a bad answer_position: {exc}"
                    ) from exc
                _check_workbooks(task)
                _check_positions(task)
            seen.add(task.id)
            tasks.append(task)
        except TaskFormatError as exc:
            if not skip_bad:
                raise
            label = entry.get("id", f"#{position}") if isinstance(entry, dict) else f"#{position}"
            kind = "empty-position" if isinstance(exc, EmptyAnswerPositionError) else "load"
            problems.append(TaskProblem(str(label), str(exc), kind))
    return TaskSet(root=root, tasks=tasks, problems=problems)


def foreign_to_task_set(root: Path, side_files: Collection[str] = ()) -> str | None:
    """What in folder ``root`` a command writing task sets did not write; None when nothing.

    A task set a data command wrote is ``dataset.json``, the task folders it
    lists and the command's ``side_files`` (a report). ``--overwrite`` may replace
    such a folder, and nothing else (a run, a user's files).
    """
    index = root / "dataset.json"
    if not index.is_file():
        names = sorted(p.name for p in root.iterdir())
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} entries)" if len(names) > 4 else "")
        return f"files that are no task set (no dataset.json: {shown})"
    try:
        entries = json.loads(index.read_text(encoding="utf-8"))
        folders = {Path(str(e["spreadsheet_path"])).parts[0] for e in entries}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError, IndexError):
        return "an unreadable dataset.json"
    known = {"dataset.json", *folders, *side_files}
    strays = sorted(p.name for p in root.iterdir() if p.name not in known)
    if strays:
        return f"entries no task set of ours holds ({', '.join(strays[:4])})"
    return None


def write_dataset_index(root: Path, tasks: Sequence[Task]) -> Path:
    """Write ``dataset.json`` for ``tasks`` (atomically: never a half-written index)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "dataset.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps([t.to_json(root) for t in tasks], indent=2, ensure_ascii=False))
    tmp.replace(path)
    return path

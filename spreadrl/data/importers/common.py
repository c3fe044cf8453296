"""Pieces every importer shares: the report, the staged output folder, checks.

An import never loses data: it refuses a non-empty ``out`` unless asked to
overwrite, refuses an ``out`` nested with its source, and writes into a staging
folder beside ``out`` that replaces it only once every task was written.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from spreadrl.archive_gate import WorkbookRefused, check_archive
from spreadrl.cells import AnswerPositionError, parse_answer_position
from spreadrl.data.task import (
    CELL_LEVEL,
    INSTRUCTION_TYPES,
    SHEET_LEVEL,
    Task,
    TaskCase,
    TaskProblem,
    TaskSet,
    foreign_to_task_set,
    load_tasks,
    write_dataset_index,
)
from spreadrl.errors import SpreadrlError, TaskFormatError
from spreadrl.run_folder import FolderCheck, check_output_folder, name_the_file

log = logging.getLogger(__name__)

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
_RANGE = re.compile(r"^([A-Z]{1,3})?(\d+)?(?::([A-Z]{1,3})?(\d+)?)?$")


@dataclass
class ImportReport:
    """What an import did: the tasks written to ``out`` and the ones skipped, with reasons."""

    source: str
    src: Path
    out: Path
    imported_ids: list[str] = field(default_factory=list)
    skipped: list[TaskProblem] = field(default_factory=list)
    task_set: TaskSet | None = None

    @property
    def imported(self) -> int:
        """How many tasks were written."""
        return len(self.imported_ids)


def check_paths(
    src: Path, out: Path, *, overwrite: bool, written_by: FolderCheck | None = None
) -> None:
    """Refuse an ``out`` that would lose data: non-empty (without overwrite), a run, a folder
    that is no task set (``written_by``, by default :func:`foreign_to_task_set`), or nested
    with ``src``."""
    if not src.exists():
        raise SpreadrlError(f"{src}: no such file or folder to import from")
    src_r, out_r = src.resolve(), out.resolve()
    if src_r == out_r or src_r.is_relative_to(out_r) or out_r.is_relative_to(src_r):
        raise SpreadrlError(
            f"--out {out} and the source {src} overlap; choose an output folder outside the source"
        )
    check_output_folder(out, overwrite=overwrite, written_by=written_by or foreign_to_task_set)


class StagedOutput:
    """A staging folder beside ``out`` that becomes ``out`` on :meth:`commit`.

    Until the commit nothing in ``out`` changes, so a failed import leaves the
    previous contents intact: used as a context manager, the staging folder goes when
    the block raises, and an ``OSError`` that names no file (a full disk's) names ``out``.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.path = out.parent / f".{out.name}.importing-{os.getpid()}"
        if self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir()

    def commit(self, tasks: list[Task]) -> TaskSet:
        write_dataset_index(self.path, tasks)
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.replaced-{os.getpid()}"
            self.out.rename(old)
            self.path.rename(self.out)
            shutil.rmtree(old)
        else:
            self.path.rename(self.out)
        return load_tasks(self.out)

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if exc is None:
            return
        self.discard()
        name_the_file(exc, self.out)


def check_task_id(task_id: object, where: str) -> str:
    """Task ids become folder and file names: refuse empty ones and path separators."""
    text = str(task_id).strip() if task_id is not None else ""
    if not text or not _SAFE_ID.match(text):
        raise TaskFormatError(
            f"{where}: task id {text!r} cannot be a folder name "
            "(use letters, digits, '.', '_' and '-')"
        )
    return text


def check_xlsx(path: Path, task_id: str) -> None:
    """Cheap readability check (a zip holding xl/workbook.xml) without parsing the workbook."""
    if not path.is_file():
        raise TaskFormatError(f"task {task_id!r}: workbook {path} does not exist")
    if not is_xlsx_bytes_file(path):
        raise TaskFormatError(
            f"task {task_id!r}: {path} is not a readable .xlsx workbook "
            "(not a zip archive with xl/workbook.xml)"
        )


def is_xlsx_bytes_file(path: Path) -> bool:
    """A zip holding xl/workbook.xml; TaskFormatError for one the archive gate refuses."""
    try:
        check_archive(path)
        with zipfile.ZipFile(path) as archive:
            return "xl/workbook.xml" in archive.namelist()
    except WorkbookRefused as exc:
        raise TaskFormatError(str(exc)) from exc  # a task problem: --skip-bad skips it
    except (OSError, zipfile.BadZipFile):
        return False


def is_xlsx_bytes(data: bytes, name: str = "workbook") -> bool:
    """The in-memory twin of :func:`is_xlsx_bytes_file`: a zip holding xl/workbook.xml."""
    try:
        check_archive(data, name=name)
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "xl/workbook.xml" in archive.namelist()
    except WorkbookRefused as exc:
        raise TaskFormatError(str(exc)) from exc
    except zipfile.BadZipFile:
        return False


def check_answer_position(text: object, task_id: str, where: str) -> str:
    """The answer_position as given, after checking that it parses."""
    if not isinstance(text, str) or not text.strip():
        raise TaskFormatError(f"{where}: task {task_id!r} has no answer_position")
    try:
        parse_answer_position(text)
    except AnswerPositionError as exc:
        raise TaskFormatError(
            f"{where}: task {task_id!r} has a bad answer_position: {exc}"
        ) from exc
    return text


def normalize_instruction_type(value: object, task_id: str, where: str) -> str:
    """Accept the full names and the short ``Cell-Level`` / ``sheet`` spellings."""
    text = str(value).strip()
    if text in INSTRUCTION_TYPES:
        return text
    lowered = text.lower()
    if lowered.startswith("cell"):
        return CELL_LEVEL
    if lowered.startswith("sheet"):
        return SHEET_LEVEL
    raise TaskFormatError(
        f"{where}: task {task_id!r} has instruction_type {text!r}; "
        f"expected one of {', '.join(INSTRUCTION_TYPES)}"
    )


def infer_instruction_type(answer_position: str) -> str:
    """Sheet-Level when the position covers whole-sheet ranges, else Cell-Level.

    Spreadsheet-RL records no instruction_type. A position is taken as
    sheet-level when it names more than one sheet, a column- or row-only range
    (``A:G``), or a multi-column block anchored at A1 (a whole table); anything
    else (single cells, a column of results) is cell-level.
    """
    references = parse_answer_position(answer_position)
    if len({sheet for sheet, _ in references}) > 1:
        return SHEET_LEVEL
    for _, cell_range in references:
        match = _RANGE.match(cell_range)
        if not match:
            continue
        c1, r1, c2, r2 = match.groups()
        if ":" in cell_range and (not r1 or not r2 or not c1 or not c2):
            return SHEET_LEVEL
        if c1 == "A" and r1 == "1" and c2 and c2 != c1 and r2 and r2 != r1:
            return SHEET_LEVEL
    return CELL_LEVEL


def write_task(
    staging: Path,
    task_id: str,
    cases: list[tuple[Callable[[Path], None], Callable[[Path], None]]],
    **fields: object,
) -> Task:
    """Write one task's cases in the native naming; each writer fills one file."""
    folder = staging / task_id
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    written = []
    for n, (write_input, write_answer) in enumerate(cases, start=1):
        input_path = folder / f"{n}_{task_id}_input.xlsx"
        answer_path = folder / f"{n}_{task_id}_answer.xlsx"
        write_input(input_path)
        write_answer(answer_path)
        written.append(TaskCase(n, input_path, answer_path))
    return Task(id=task_id, cases=tuple(written), folder=folder, **fields)


def copier(path: Path) -> Callable[[Path], None]:
    return lambda dest: shutil.copyfile(path, dest)


def writer(data: bytes) -> Callable[[Path], None]:
    return lambda dest: dest.write_bytes(data)


def run_import(
    report: ImportReport,
    items: Iterable[tuple[str, Callable[[Path], Task]]],
    *,
    skip_bad: bool,
) -> ImportReport:
    """Build each task into a staging folder; commit only when all wanted tasks are written.

    ``items`` are (label, build) pairs; ``build(staging)`` writes one task and
    returns it or raises TaskFormatError. Duplicate ids are problems too.
    """
    tasks: list[Task] = []
    seen: set[str] = set()
    with StagedOutput(report.out) as staged:
        for label, build in items:
            try:
                if label in seen:
                    raise TaskFormatError(f"task {label!r}: duplicate task id")
                task = build(staged.path)
            except TaskFormatError as exc:
                if not skip_bad:
                    raise
                log.info("skipping %s: %s", label, exc)
                report.skipped.append(TaskProblem(label, str(exc)))
                continue
            seen.add(task.id)
            tasks.append(task)
        if not tasks:
            reasons = "; ".join(f"{p.task_id}: {p.message}" for p in report.skipped[:3])
            raise TaskFormatError(
                f"{report.src}: no task could be imported" + (f" ({reasons})" if reasons else "")
            )
        report.task_set = staged.commit(tasks)
    report.imported_ids = [task.id for task in tasks]
    return report

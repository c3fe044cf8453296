"""Procedural spreadsheet tasks: seeded families written in the native layout.

``synthesize(out, n, seed)`` draws ``n`` tasks from the families in
:data:`FAMILIES`, writes each as SpreadsheetBench does (input, answer and
reference-solution files per case, plus dataset.json), checks every case
with the ``check`` it is given (the real one is
:func:`spreadrl.env.spreadsheet.case_check.verify_case`, which grades with env's checker, so
the caller passes it: data never imports env) and returns the loaded
:class:`~spreadrl.data.task.TaskSet`. The same seed gives the same
dataset.json byte for byte and the same workbook contents.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spreadrl.data.importers.common import StagedOutput
from spreadrl.data.synth import aggregates, columns, sheets
from spreadrl.data.synth.base import (
    DIFFICULTIES,
    CaseCheck,
    Family,
    SynthVerificationError,
    TaskSpec,
)
from spreadrl.data.task import Task, TaskCase, TaskSet, foreign_to_task_set
from spreadrl.errors import SpreadrlError
from spreadrl.interrupts import interrupts_between_items
from spreadrl.reporting import LogReporter, Reporter
from spreadrl.run_folder import check_output_folder

log = logging.getLogger(__name__)


def _collect() -> dict[str, Family]:
    families: dict[str, Family] = {}
    for module in (aggregates, columns, sheets):
        for family in module.FAMILIES:
            families[family.name] = family
    return families


FAMILIES: dict[str, Family] = _collect()


def _select(
    families: Sequence[str] | None, difficulty: Sequence[str] | None
) -> list[tuple[Family, tuple[str, ...]]]:
    names = list(families) if families else list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SpreadrlError(
            f"unknown synth family {', '.join(map(repr, unknown))}; allowed: {', '.join(FAMILIES)}"
        )
    levels = list(difficulty) if difficulty else list(DIFFICULTIES)
    bad = [d for d in levels if d not in DIFFICULTIES]
    if bad:
        raise SpreadrlError(
            f"unknown difficulty {', '.join(map(repr, bad))}; allowed: {', '.join(DIFFICULTIES)}"
        )
    chosen = []
    for name in names:
        family = FAMILIES[name]
        supported = tuple(d for d in levels if d in family.difficulties)
        if supported:
            chosen.append((family, supported))
    if not chosen:
        raise SpreadrlError(
            f"no family among {', '.join(names)} supports difficulty {', '.join(levels)}"
        )
    return chosen


def describe_families() -> list[dict[str, Any]]:
    """One row per family (name, instruction_type, difficulties, summary, an example)."""
    rows = []
    for family in FAMILIES.values():
        level = family.difficulties[0]
        example = family.generate(random.Random(f"describe:{family.name}"), level, 1)
        rows.append(
            {
                "name": family.name,
                "instruction_type": family.instruction_type,
                "difficulties": list(family.difficulties),
                "summary": family.summary,
                "example": example.instruction,
            }
        )
    return rows


def _write_task(folder: Path, task_id: str, spec: TaskSpec) -> tuple[TaskCase, ...]:
    folder.mkdir(parents=True, exist_ok=True)
    cases = []
    for n, case in enumerate(spec.cases, start=1):
        input_path = folder / f"{n}_{task_id}_input.xlsx"
        answer_path = folder / f"{n}_{task_id}_answer.xlsx"
        solution_path = folder / f"{n}_{task_id}_solution.json"
        case.input.save(input_path)
        case.answer.save(answer_path)
        solution = {"task": task_id, "case": n, "calls": case.calls}
        solution_path.write_text(json.dumps(solution, indent=1, ensure_ascii=False))
        cases.append(TaskCase(n, input_path, answer_path, solution_path))
    return tuple(cases)


def synthesize(
    out: Path,
    n: int,
    seed: int,
    families: Sequence[str] | None = None,
    difficulty: Sequence[str] | None = None,
    cases: int | None = None,
    *,
    check: CaseCheck | None = None,
    overwrite: bool = False,
    reporter: Reporter | None = None,
    id_prefix: str = "synth",
) -> TaskSet:
    """Write ``n`` tasks to ``out`` and return them loaded.

    Families are drawn round-robin in a seed-shuffled order (so small sets still
    cover every family), each task's difficulty uniformly from the allowed ones
    it supports; ``cases`` fixes the case count (default 1-3 at random).
    ``reporter`` shows the progress (the CLI: a bar; default: none).
    ``check`` (e.g. :func:`spreadrl.env.spreadsheet.case_check.verify_case`) checks every
    written case and raises :class:`SynthVerificationError` on the first
    problem; without it the cases are written unchecked.
    ``out`` must be empty or absent unless ``overwrite``.
    """
    out = Path(out)
    if n < 1:
        raise SpreadrlError(f"n must be at least 1, got {n}")
    if cases is not None and not 1 <= cases <= 3:
        raise SpreadrlError(f"cases must be 1, 2 or 3, got {cases}")
    chosen = _select(families, difficulty)
    # a file, a run, a folder holding more than a task set, or one not empty without --overwrite
    check_output_folder(out, overwrite=overwrite, written_by=foreign_to_task_set)
    order = list(chosen)
    random.Random(f"order:{seed}").shuffle(order)
    # written beside ``out`` and swapped in at the end: a stopped run leaves ``out`` as it was
    with StagedOutput(out) as staged:
        tasks = _write_tasks(staged.path, order, n, seed, cases, check, reporter, id_prefix)
        return staged.commit(tasks)


def _write_tasks(
    root: Path,
    order: list[tuple[Family, tuple[str, ...]]],
    n: int,
    seed: int,
    cases: int | None,
    check: CaseCheck | None,
    reporter: Reporter | None,
    id_prefix: str,
) -> list[Task]:
    """Generate and write ``n`` tasks into ``root``, checking each case with ``check``."""
    tasks: list[Task] = []
    reporter = reporter or LogReporter()
    with (
        reporter.progress("synthesizing", n, keep=False) as bar,
        interrupts_between_items() as check_interrupt,
    ):
        for i in range(n):
            check_interrupt()  # Ctrl-C stops between tasks, never inside openpyxl
            family, levels = order[i % len(order)]
            rng = random.Random(f"{seed}:{i}:{family.name}")
            level = rng.choice(levels)
            spec = family.generate(rng, level, cases or rng.randint(1, 3))
            task_id = f"{id_prefix}-{seed}-{i:05d}"
            folder = root / task_id
            written = _write_task(folder, task_id, spec)
            if check is not None:
                _verify(check, family.name, seed, i, spec, written)
            tasks.append(
                Task(
                    id=task_id,
                    instruction=spec.instruction,
                    instruction_type=spec.instruction_type,
                    answer_position=spec.answer_position,
                    cases=written,
                    folder=folder,
                    source="synth",
                    family=family.name,
                    difficulty=level,
                    metadata={"seed": seed, "index": i, **spec.metadata},
                )
            )
            bar.advance()
    return tasks


def _verify(
    check: CaseCheck,
    name: str,
    seed: int,
    index: int,
    spec: TaskSpec,
    written: tuple[TaskCase, ...],
) -> None:
    for case, case_spec in zip(written, spec.cases, strict=True):
        problems = check(case.input_path, case.answer_path, spec.answer_position, case_spec.calls)
        if problems:
            raise SynthVerificationError(
                f"family {name!r} (seed {seed}, task {index}, case {case.index}) produced a bad "
                f"task: {'; '.join(problems)} [instruction: {spec.instruction!r}, "
                f"answer_position {spec.answer_position}, folder {case.input_path.parent}]"
            )


__all__ = [
    "DIFFICULTIES",
    "FAMILIES",
    "CaseCheck",
    "Family",
    "SynthVerificationError",
    "describe_families",
    "synthesize",
]

"""The SpreadsheetBench-compatible answer checker: the reward of every episode.

A case passes iff every cell named by ``answer_position`` has the same value in
the agent's output as in the answer workbook, after SpreadsheetBench's own
normalisation (:func:`normalize_value`, :func:`values_match`). Workbooks are read
with computed values; one whose formulas lack cached values (openpyxl saves
none) is recalculated first (see :mod:`spreadrl.env.spreadsheet.recalc`). See docs/checker.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spreadrl.archive_gate import WorkbookRefused

# answer_position parsing and A1 ranges are part of the task format: they live in
# the low layer (spreadrl.cells) and are re-exported here for existing callers
from spreadrl.cells import (  # noqa: F401
    MAX_COLUMN,
    MAX_ROW,
    AnswerPositionError,
    column_name,
    parse_answer_position,
    range_cells,
)
from spreadrl.data.task import Task
from spreadrl.env.spreadsheet.recalc.errors import FAILS_CHECK
from spreadrl.env.spreadsheet.recalc.locales import (
    AUTO,
    DEFAULT_LOCALE,
    infer_locale,
    recalc_locale,
)
from spreadrl.env.spreadsheet.recalc.values import WorkbookValues, load_values
from spreadrl.env.spreadsheet.value_compare import sbench_transform, transformed_values_match
from spreadrl.env.types import Mismatch
from spreadrl.errors import ConfigError, WorkbookError

# ---------------------------------------------------------------- value rules


def normalize_value(value: object) -> object:
    """SpreadsheetBench's transform: numbers (and bools) and numeric strings ->
    round(float, 2); time -> "HH:MM"; datetime -> serial days rounded to 0 places;
    and a duration (``timedelta``, a ``[h]:mm`` cell) -> ("duration", whole seconds).

    SpreadsheetBench writes a time as ``str(t)[:-3]``, which is "HH:MM" for whole
    seconds but "HH:MM:SS.mmm" when openpyxl's millisecond rounding of a recalculated
    serial leaves a fraction; here it is "HH:MM" always. It leaves durations to ``==``,
    where a last-bit difference of the serial is a millisecond apart; here they compare
    to the second, and only with durations.
    """
    if isinstance(value, dt.time):
        return f"{value.hour:02d}:{value.minute:02d}"
    if isinstance(value, dt.timedelta):
        return ("duration", round(value.total_seconds()))
    return sbench_transform(value)


def values_match(expected: object, actual: object) -> bool:
    """SpreadsheetBench's compare_cell_value: empty == "", types must agree, then ==."""
    return transformed_values_match(normalize_value(expected), normalize_value(actual))


# ---------------------------------------------------------------- checking


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one output workbook. ``passed`` iff no mismatches."""

    passed: bool
    mismatches: list[Mismatch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    checked_cells: int = 0
    # "Sheet!A1" -> what produced the output's value: "cached" (stored in the file),
    # or the engine that computed it ("ironcalc", "libreoffice").
    cell_engines: dict[str, str] = field(default_factory=dict)
    # why the archive gate refused the output ("" when it was read): scored as a failure
    refused: str = ""


def _fail(reason: str, sheet: str = "", cell: str = "") -> CheckResult:
    return CheckResult(False, [Mismatch(sheet, cell, None, None, reason)], [], 0)


def check_workbook(
    output_path: str | Path,
    answer_path: str | Path,
    answer_position: str,
    *,
    engine: str = "hybrid",
    scoring: str = "hybrid",
    locale: str = DEFAULT_LOCALE,
) -> CheckResult:
    """Compare ``output_path`` with ``answer_path`` on every cell of ``answer_position``.

    A missing or unreadable output, or a sheet missing from it, gives a failed
    result with the reason; an unreadable answer raises WorkbookError. A formula
    cell the engine could not compute (``#NAME?``/``#N/IMPL!`` after a recalc)
    is a mismatch and is listed in ``errors``. ``scoring="spreadsheetbench"``
    gives SpreadsheetBench's own verdict instead (:mod:`spreadrl.env.spreadsheet.sbench`;
    ``engine`` and ``locale`` are then unused: upstream converts with LibreOffice's
    defaults). ``locale`` is the one TEXT and number formats render in for every
    engine (:mod:`spreadrl.env.spreadsheet.recalc.locales`); ``auto`` reads it from the answer's
    cached TEXT results, en-US where they say nothing.
    """
    output_path, answer_path = Path(output_path), Path(answer_path)
    if scoring != "hybrid":
        return check_many([(output_path, answer_path, answer_position)], scoring=scoring)[0]
    if locale == AUTO:
        locale = (infer_locale(answer_path) if answer_path.is_file() else None) or DEFAULT_LOCALE
    with recalc_locale(locale):
        return _check_hybrid(output_path, answer_path, answer_position, engine)


def _check_hybrid(
    output_path: Path, answer_path: Path, answer_position: str, engine: str
) -> CheckResult:
    positions = parse_answer_position(answer_position)
    if not answer_path.is_file():
        raise WorkbookError(f"{answer_path}: answer workbook does not exist")
    answer = load_values(answer_path, engine=engine)
    if not output_path.is_file():
        return _fail(f"output file {output_path} does not exist")
    try:
        output = load_values(output_path, engine=engine)
    except WorkbookRefused as exc:
        return CheckResult(False, [Mismatch("", "", None, None, str(exc))], [], refused=str(exc))
    except WorkbookError as exc:
        return _fail(f"output unreadable: {exc}")

    mismatches: list[Mismatch] = []
    errors: list[str] = []
    checked = 0
    cell_engines: dict[str, str] = {}
    for sheet, cell_range in positions:
        gt_sheet = answer.sheet_names[0] if sheet is None else answer.find_sheet(sheet)
        if gt_sheet is None:
            message = f"sheet {sheet!r} is not in the answer workbook {answer_path.name}"
            errors.append(message)
            mismatches.append(Mismatch(sheet or "", cell_range, None, None, message))
            continue
        out_sheet = output.find_sheet(gt_sheet)
        if out_sheet is None:
            mismatches.append(
                Mismatch(
                    gt_sheet, cell_range, None, None, f"sheet {gt_sheet!r} missing from output"
                )
            )
            continue
        for row, column in range_cells(cell_range, answer.max_row(gt_sheet)):
            checked += 1
            ref = f"{column_name(column)}{row}"
            expected = answer.value(gt_sheet, row, column)
            actual = output.value(out_sheet, row, column)
            cell_engines[f"{gt_sheet}!{ref}"] = output.cell_engine(out_sheet, row, column)
            out_failure = _engine_failure(output, out_sheet, row, column, actual, FAILS_CHECK)
            ans_failure = _engine_failure(answer, gt_sheet, row, column, expected, FAILS_CHECK)
            if out_failure and not ans_failure and expected == actual:
                # Excel's own value is this error too (#NAME? in the answer's cached
                # values): SpreadsheetBench compares the two strings, and so do we.
                out_failure = ""
            failure = out_failure or ans_failure
            if failure:
                errors.append(f"{gt_sheet}!{ref}: {failure}")
                mismatches.append(Mismatch(gt_sheet, ref, expected, actual, failure))
            elif not values_match(expected, actual):
                mismatches.append(Mismatch(gt_sheet, ref, expected, actual, _why(expected, actual)))
    if checked == 0 and not mismatches:
        # e.g. a column-only range over an empty answer sheet: comparing nothing must not
        # pass every output (task load refuses such positions; this guards the rest)
        message = (
            f"answer_position {answer_position!r} covers no cell of {answer_path.name}: "
            "nothing was compared"
        )
        errors.append(message)
        mismatches.append(Mismatch("", answer_position, None, None, message))
    return CheckResult(not mismatches, mismatches, errors, checked, cell_engines)


def check_many(
    triples: list[tuple[Path, Path, str]],
    *,
    engine: str = "hybrid",
    scoring: str = "hybrid",
    locale: str = DEFAULT_LOCALE,
) -> list[CheckResult]:
    """:func:`check_workbook` on many (output, answer, answer_position) triples.

    With ``scoring="spreadsheetbench"`` every output is converted by one LibreOffice
    process (starting one per file would cost seconds each); the hybrid checks one by one.
    """
    check_scoring_name(scoring, "scoring")
    if scoring == "hybrid":
        return [check_workbook(o, a, p, engine=engine, locale=locale) for o, a, p in triples]
    from spreadrl.env.spreadsheet.sbench import sbench_check

    for _, answer, _ in triples:
        if not Path(answer).is_file():
            raise WorkbookError(f"{answer}: answer workbook does not exist")
    verdicts = sbench_check(
        [t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples]
    )
    return [
        CheckResult(not mismatches, mismatches, notes, checked, {}, refused=refused)
        for mismatches, checked, notes, refused in verdicts
    ]


def check_scoring_name(name: str, where: str) -> None:
    """Raise a ConfigError naming ``where`` unless ``name`` is a scoring this checker has."""
    from spreadrl.env.spreadsheet.sbench import SCORINGS

    if name not in SCORINGS:
        raise ConfigError(f"{where} {name!r}: unknown scoring; choose one of {', '.join(SCORINGS)}")


def _engine_failure(
    book: WorkbookValues, sheet: str, row: int, column: int, value: object, bad: frozenset[str]
) -> str:
    if not book.recalculated or not isinstance(value, str) or value not in bad:
        return ""
    formula = book.formula(sheet, row, column)
    if formula is None:
        return ""
    return (
        f"engine {book.cell_engine(sheet, row, column)} could not evaluate {formula} in "
        f"{book.path.name} ({value}: unsupported or unknown function); no engine here "
        f"computes it: save cached values (or install LibreOffice for --engine hybrid)"
    )


def _why(expected: object, actual: object) -> str:
    a, b = normalize_value(expected), normalize_value(actual)
    if a in ("", None) or b in ("", None):
        return "expected empty cell" if a in ("", None) else "cell is empty"
    if type(a) is not type(b):
        return f"type differs ({type(a).__name__} vs {type(b).__name__} after normalising)"
    return f"value differs ({a!r} vs {b!r} after normalising)"


@dataclass(frozen=True)
class TaskScore:
    """One task's cases checked against a folder of outputs (SpreadsheetBench's metrics)."""

    task_id: str
    results: dict[int, CheckResult]
    missing: list[int]

    @property
    def soft(self) -> float:
        """Passed cases / cases."""
        return soft_hard([r.passed for r in self.results.values()])[0]

    @property
    def hard(self) -> float:
        """1.0 iff every case passed."""
        return soft_hard([r.passed for r in self.results.values()])[1]


def soft_hard(passed: Sequence[bool]) -> tuple[float, float]:
    """SpreadsheetBench's two scores of one task from its cases' verdicts: soft = the
    share of cases passed, hard = 1.0 iff every case passed (both 0.0 with no case)."""
    if not passed:
        return 0.0, 0.0
    return sum(passed) / len(passed), float(all(passed))


def score_task(
    task: Task,
    outputs_dir: Path,
    *,
    engine: str = "hybrid",
    scoring: str = "hybrid",
    locale: str = DEFAULT_LOCALE,
) -> TaskScore:
    """Check ``{n}_{id}_output.xlsx`` in ``outputs_dir`` for every case of ``task``.

    A missing output is a failed case and is listed in ``missing``.
    """
    outputs = [Path(outputs_dir) / task.output_name(case.index) for case in task.cases]
    missing = [c.index for c, o in zip(task.cases, outputs, strict=True) if not o.is_file()]
    triples = [
        (o, c.answer_path, task.answer_position) for c, o in zip(task.cases, outputs, strict=True)
    ]
    checked = check_many(triples, engine=engine, scoring=scoring, locale=locale)
    results = {c.index: r for c, r in zip(task.cases, checked, strict=True)}
    return TaskScore(task.id, results, missing)

"""Task filters that grade with the environment: workbooks open, answers reproduce.

They keep :class:`spreadrl.data.filters.Filter`'s contract (``name``,
``check(task) -> reason or None``) and run in :func:`spreadrl.data.filters.apply_filters`
beside the data-only filters; they live here because they open workbooks with
the reward's recalculation and compare cells with its checker, and the data
layer does not import the environment.
"""

from __future__ import annotations

from spreadrl.cells import AnswerPositionError, column_name, parse_answer_position, range_cells
from spreadrl.data.task import Task
from spreadrl.env.spreadsheet.checker import check_workbook, values_match
from spreadrl.env.spreadsheet.recalc.errors import FAILS_CHECK
from spreadrl.env.spreadsheet.recalc.values import load_values
from spreadrl.errors import WorkbookError

# ---------------------------------------------------------------- structure


class StructureFilter:
    """Workbooks open, answer_position parses, and no case is solved by its input already."""

    name = "structure"

    def __init__(self, engine: str = "hybrid") -> None:
        self.engine = engine

    def check(self, task: Task) -> str | None:
        try:
            parse_answer_position(task.answer_position)
        except AnswerPositionError as exc:
            return f"answer_position {task.answer_position!r} does not parse: {exc}"
        for case in task.cases:
            for path in (case.input_path, case.answer_path):
                try:
                    load_values(path, engine=self.engine, recalc=False)
                except WorkbookError as exc:
                    return f"case {case.index}: workbook does not open ({exc})"
            result = check_workbook(
                case.input_path, case.answer_path, task.answer_position, engine=self.engine
            )
            if result.passed:
                return (
                    f"case {case.index}: the input already matches the answer at "
                    f"{task.answer_position} (doing nothing passes)"
                )
        return None


# ---------------------------------------------------------------- reproducibility


class ReproducibleFilter:
    """The answer recalculated by our engine equals the answer as saved (Excel's values).

    A cell whose formula our engine cannot evaluate (``#NAME?``, ``#N/IMPL!``)
    or evaluates differently would make the reward depend on Excel, which the
    training loop does not have: such tasks are dropped, naming the cells.
    """

    name = "reproducible"

    def __init__(self, engine: str = "hybrid", max_cells: int = 3) -> None:
        self.engine = engine
        self.max_cells = max_cells

    def check(self, task: Task) -> str | None:
        for case in task.cases:
            try:
                saved = load_values(case.answer_path, engine=self.engine, recalc=False)
                fresh = load_values(case.answer_path, engine=self.engine, recalc=True)
            except WorkbookError as exc:
                return f"case {case.index}: answer does not open ({exc})"
            bad: list[str] = []
            for sheet, cell_range in parse_answer_position(task.answer_position):
                name = saved.sheet_names[0] if sheet is None else saved.find_sheet(sheet)
                if name is None:
                    return f"case {case.index}: sheet {sheet!r} is not in the answer workbook"
                for row, column in range_cells(cell_range, saved.max_row(name)):
                    before = saved.value(name, row, column)
                    after = fresh.value(name, row, column)
                    formula = fresh.formula(name, row, column)
                    ref = f"{name}!{column_name(column)}{row}"
                    if isinstance(after, str) and after in FAILS_CHECK and formula:
                        bad.append(f"{ref} {formula} -> {after} (only Excel computes it)")
                    elif formula and before is not None and not values_match(before, after):
                        bad.append(f"{ref} {formula}: saved {before!r}, recalculated {after!r}")
            if bad:
                shown = "; ".join(bad[: self.max_cells])
                more = f" (+{len(bad) - self.max_cells} more)" if len(bad) > self.max_cells else ""
                return f"case {case.index}: answer not reproducible by {self.engine}: {shown}{more}"
        return None

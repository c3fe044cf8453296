"""`spreadrl bench check`: checker throughput and recalculation time per engine.

Generates its own workbooks (no task synthesizer needed): ``--tasks`` small
tasks (a 200-row table, answer in a 20-cell column; the odd-numbered outputs
hold uncached openpyxl formulas, so they need a recalculation) and one workbook with
``--formulas`` formula cells. With ``--builtin SPLIT`` it also times the check of every
case of a built-in split (the output is the case's reference solution replayed through
the gym), engines alternated case by case so both see the same machine load: the
median per engine and their ratio come from one run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import openpyxl

from spreadrl.data.builtin import builtin_tasks
from spreadrl.env.spreadsheet.checker import check_workbook
from spreadrl.env.spreadsheet.episode import replay
from spreadrl.env.spreadsheet.recalc import available_engines, get_engine


def _make_tasks(root: Path, count: int) -> list[tuple[Path, Path, str]]:
    cases = []
    for i in range(count):
        answer, output = openpyxl.Workbook(), openpyxl.Workbook()
        for wb in (answer, output):
            ws = wb.active
            ws.title = "Data"
            for r in range(1, 201):
                ws.append([r, r * 1.5 + i, f"item {r}", r * 2 if r > 180 else None])
        for r in range(1, 21):
            answer.active[f"E{r}"] = r * 2.5 + i
            output.active[f"E{r}"] = f"=B{r}+A{r}" if i % 2 else r * 2.5 + i
        a, o = root / f"{i}_answer.xlsx", root / f"{i}_output.xlsx"
        answer.save(a)
        output.save(o)
        cases.append((o, a, "Data!E1:E20"))
    return cases


def _make_formula_book(path: Path, formulas: int) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    rows = formulas // 5
    for r in range(1, rows + 1):
        ws.cell(r, 1, r)
        ws.cell(r, 2, f"=A{r}*2")
        ws.cell(r, 3, f"=IF(B{r}>100,B{r}-1,B{r}+1)")
        ws.cell(r, 4, f"=ROUND(C{r}/3,2)")
        ws.cell(r, 5, f'=TEXT(A{r},"0000")&"-x"')
        ws.cell(r, 6, f"=SUM($A$1:A{r})")
    wb.save(path)
    return path


def builtin_check_times(
    split: str, root: Path, engines: tuple[str, ...] = ("ironcalc", "hybrid"), passes: int = 3
) -> dict[str, Any]:
    """Per-engine check times (s) of every case of built-in ``split`` whose reference
    solution replays; engines alternate case by case. Also counts passes per engine."""
    cases = []
    for task in builtin_tasks(split):
        for case in task.cases:
            calls = case.load_solution()
            if calls is None:
                continue
            output = root / task.output_name(case.index)
            replay(task, case.index, calls, output_path=output)
            cases.append((output, case.answer_path, task.answer_position))
    times: dict[str, list[float]] = {engine: [] for engine in engines}
    passed: dict[str, int] = dict.fromkeys(engines, 0)
    for engine in engines:  # warm imports and any engine start-up outside the timings
        check_workbook(*cases[0], engine=engine)
    for round_ in range(passes):
        for output, answer, position in cases:
            for engine in engines if round_ % 2 == 0 else tuple(reversed(engines)):
                start = time.perf_counter()
                result = check_workbook(output, answer, position, engine=engine)
                times[engine].append(time.perf_counter() - start)
                passed[engine] += result.passed
    return {"cases": len(cases), "passes": passes, "times": times, "passed": passed}


def check_rows(
    tasks: int = 40, formulas: int = 10_000, builtin: str = "test", passes: int = 3
) -> list[tuple[str, str, str]]:
    """Tasks checked per second, and recalc time of a 10,000-formula workbook per engine:
    (measure, engine, value) rows."""
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="spreadrl-bench-") as tmp:
        root = Path(tmp)
        cases = _make_tasks(root, tasks)
        check_workbook(*cases[0])  # warm imports
        for label, subset in (("cached", cases[0::2]), ("uncached formulas", cases[1::2])):
            start = time.perf_counter()
            passed = sum(check_workbook(*case).passed for case in subset)
            elapsed = time.perf_counter() - start
            rows.append(
                (
                    f"check, {label} ({passed}/{len(subset)} pass)",
                    "hybrid",  # check_workbook's default engine
                    f"{len(subset) / elapsed:.0f} tasks/s ({1000 * elapsed / len(subset):.1f} ms each)",
                )
            )
        book = _make_formula_book(root / "formulas.xlsx", formulas)
        for name in available_engines():
            engine = get_engine(name)
            start = time.perf_counter()
            engine.recalculate(book, root / f"recalc-{name}.xlsx")
            elapsed = time.perf_counter() - start
            rows.append((f"recalculate {formulas:,} formulas", name, f"{elapsed:.2f} s"))
        if builtin:
            import statistics

            out = root / "builtin"
            out.mkdir()
            report = builtin_check_times(builtin, out, passes=passes)
            medians = {e: statistics.median(t) for e, t in report["times"].items()}
            for engine, median in medians.items():
                rows.append(
                    (
                        f"check, built-in {builtin} ({report['cases']} cases x {passes}, "
                        f"{report['passed'][engine]} pass), median",
                        engine,
                        f"{1000 * median:.2f} ms",
                    )
                )
            if "ironcalc" in medians and "hybrid" in medians:
                ratio = medians["hybrid"] / medians["ironcalc"]
                rows.append(("hybrid / ironcalc, same run", "", f"{ratio:.2f}x"))
    return rows

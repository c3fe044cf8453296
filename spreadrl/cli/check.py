"""`spreadrl check`: score agent outputs with the SpreadsheetBench-compatible checker."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from spreadrl.cli.console import plain
from spreadrl.data.sources import spreadsheet_tasks
from spreadrl.data.task import load_tasks
from spreadrl.env.config import check_engine_name
from spreadrl.env.spreadsheet.recalc.locales import check_locale_name
from spreadrl.errors import SpreadrlError


def check(
    tasks_dir: Path | None = typer.Argument(
        None,
        help="Task set to score every task of: a folder (with dataset.json) or builtin:<split>.",
    ),
    outputs: Path | None = typer.Option(
        None, "--outputs", help="Folder holding {n}_{id}_output.xlsx files (with TASKS_DIR)."
    ),
    json_path: Path | None = typer.Option(None, "--json", help="Write per-task results here."),
    task: str | None = typer.Option(
        None, "--task", help="One task: its folder, or its id (with TASKS_DIR)."
    ),
    output: Path | None = typer.Option(None, "--output", help="The output workbook to check."),
    case: int = typer.Option(1, "--case", help="Which test case of --task (default 1)."),
    engine: str = typer.Option(
        "hybrid", "--engine", help="Recalculation engine: hybrid, ironcalc or libreoffice."
    ),
    scoring: str = typer.Option(
        "hybrid",
        "--scoring",
        help="hybrid (spreadrl's reward) or spreadsheetbench (SpreadsheetBench's own path: "
        "LibreOffice's conversion of each output, its value rules; --engine unused).",
    ),
    locale: str = typer.Option(
        "en-US",
        "--locale",
        help="Locale TEXT and number formats render in (en-US, de-DE, zh-CN, ...), or auto: "
        "read from each answer's cached TEXT results.",
    ),
) -> None:
    """Score outputs: soft/hard accuracy for a task set, or every mismatching cell of one output.

    Examples:

      spreadrl check tasks/ --outputs runs/outputs --json scores.json

      spreadrl check --task tasks/sum-col --output 1_sum-col_output.xlsx --case 1

      spreadrl check tasks/ --task sum-col --output out.xlsx

      spreadrl check tasks/ --outputs runs/outputs --scoring spreadsheetbench
    """
    from spreadrl.cli.console import cli_console
    from spreadrl.env.spreadsheet.checker import check_scoring_name

    check_engine_name(engine, "--engine")
    check_scoring_name(scoring, "--scoring")
    check_locale_name(locale, "--locale")
    options = {"engine": engine, "scoring": scoring, "locale": locale}
    console = cli_console()
    if task is not None or output is not None:
        if task is None or output is None:
            raise SpreadrlError("checking one output needs both --task and --output")
        _check_one(console, tasks_dir, task, output, case, options)
        return
    if tasks_dir is None or outputs is None:
        raise SpreadrlError(
            "give TASKS_DIR --outputs DIR to score a task set, or --task T --output FILE "
            "(see `spreadrl check --help`)"
        )
    if json_path is not None:  # a folder in its place is one line before the set is scored
        from spreadrl.run_folder import check_output_file

        check_output_file(json_path, overwrite=True, flag="--json")
    _check_set(console, tasks_dir, outputs, json_path, options)


def _load_one_task(tasks_dir: Path | None, task: str):

    folder = Path(task)
    if (folder / "dataset.json").is_file():
        task_set = load_tasks(folder)
        if len(task_set) != 1:
            raise SpreadrlError(f"{folder}: holds {len(task_set)} tasks; pass TASKS_DIR --task ID")
        return task_set.tasks[0]
    if folder.is_dir() and (folder.parent / "dataset.json").is_file():
        for candidate in load_tasks(folder.parent):
            if candidate.folder.resolve() == folder.resolve():
                return candidate
        raise SpreadrlError(f"{folder}: not a task of {folder.parent / 'dataset.json'}")
    if tasks_dir is None:
        raise SpreadrlError(f"--task {task!r}: not a task folder; give TASKS_DIR to look up an id")
    return spreadsheet_tasks(tasks_dir).get(task)


def _check_one(
    console,
    tasks_dir: Path | None,
    task_arg: str,
    output: Path,
    case: int,
    options: dict[str, str],
):
    from rich.table import Table

    from spreadrl.env.spreadsheet.checker import check_workbook

    if output.is_dir():
        raise SpreadrlError(
            f"--output {output}: is a folder; give the output workbook (.xlsx) of the task, "
            f"or score a folder of outputs with TASKS_DIR --outputs {output}"
        )
    if not output.exists():
        raise SpreadrlError(f"--output {output}: file not found")
    task = _load_one_task(tasks_dir, task_arg)
    result = check_workbook(output, task.case(case).answer_path, task.answer_position, **options)
    if result.refused:  # the archive gate's reason, as one error line
        raise SpreadrlError(result.refused)
    verdict = "[green]PASS[/]" if result.passed else "[red]FAIL[/]"
    console.print(
        f"{verdict} task {plain(task.id)} case {case}: {result.checked_cells} cells checked "
        f"at {plain(repr(task.answer_position))}, {len(result.mismatches)} mismatching "
        f"(scoring: {options['scoring']})",
        highlight=False,
    )
    if result.mismatches:
        table = Table("sheet", "cell", "expected", "actual", "reason")
        for m in result.mismatches:
            table.add_row(m.sheet, m.cell, repr(m.expected), repr(m.actual), m.reason)
        console.print(table)
    for error in result.errors:
        console.print(f"[yellow]engine:[/] {plain(error)}", highlight=False)
    if not result.passed:
        raise typer.Exit(1)


def _check_set(
    console, tasks_dir: Path, outputs: Path, json_path: Path | None, options: dict[str, str]
):
    from rich.table import Table

    from spreadrl.env.spreadsheet.checker import score_task

    if not outputs.is_dir():
        what = "a file, not a folder" if outputs.exists() else "folder does not exist"
        raise SpreadrlError(f"--outputs {outputs}: {what}")
    task_set = spreadsheet_tasks(tasks_dir)
    if not len(task_set):
        raise SpreadrlError(f"{tasks_dir}: no tasks to score")
    scores = [score_task(task, outputs, **options) for task in task_set]
    scoring = options["scoring"]
    cases = sum(len(s.results) for s in scores)
    if cases and sum(len(s.missing) for s in scores) >= cases:
        first = task_set.tasks[0]
        raise SpreadrlError(
            f"--outputs {outputs}: no output workbook matches a task of {tasks_dir} "
            f"(expected names like 1_{first.id}_output.xlsx); is it the outputs folder "
            "of an eval of these tasks?"
        )
    table = Table("task", "cases passed", "soft", "hard", "missing outputs")
    for s in scores:
        passed = sum(r.passed for r in s.results.values())
        missing = ", ".join(str(i) for i in s.missing)
        table.add_row(
            s.task_id, f"{passed}/{len(s.results)}", f"{s.soft:.2f}", f"{s.hard:.0f}", missing
        )
    console.print(table)
    soft = sum(s.soft for s in scores) / len(scores)
    hard = sum(s.hard for s in scores) / len(scores)
    n_missing = sum(len(s.missing) for s in scores)
    console.print(
        f"{len(scores)} tasks ({scoring} scoring): soft accuracy {soft:.2%}, "
        f"hard accuracy {hard:.2%}"
    )
    if n_missing:
        console.print(f"{n_missing} missing outputs (counted as failures)")
    if json_path is not None:
        payload = {
            "scoring": scoring,
            "soft": soft,
            "hard": hard,
            "tasks": [
                {
                    "id": s.task_id,
                    "soft": s.soft,
                    "hard": s.hard,
                    "missing": s.missing,
                    "cases": {
                        str(i): {
                            "passed": r.passed,
                            "checked_cells": r.checked_cells,
                            "errors": r.errors,
                            "mismatches": [
                                {
                                    "sheet": m.sheet,
                                    "cell": m.cell,
                                    "expected": repr(m.expected),
                                    "actual": repr(m.actual),
                                    "reason": m.reason,
                                }
                                for m in r.mismatches[:50]
                            ],
                        }
                        for i, r in s.results.items()
                    },
                }
                for s in scores
            ],
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(payload, indent=2))
        console.print(f"wrote {json_path}", markup=False)

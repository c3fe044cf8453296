"""`spreadrl bench check`: checker throughput and recalculation time per engine."""

from __future__ import annotations

import typer
from rich.table import Table

from spreadrl.bench.check import check_rows
from spreadrl.cli.console import cli_console


def bench_check(
    tasks: int = typer.Option(40, help="Generated tasks to check."),
    formulas: int = typer.Option(10_000, help="Formula cells in the recalculation workbook."),
    builtin: str = typer.Option(
        "test", "--builtin", help="Built-in split whose cases are checked ('' to skip)."
    ),
    passes: int = typer.Option(3, "--passes", min=1, help="Rounds over the built-in cases."),
) -> None:
    """Tasks checked per second, and recalc time of a 10,000-formula workbook per engine.

    Examples:

      spreadrl bench check

      spreadrl bench check --tasks 100 --formulas 2000
    """
    table = Table("measure", "engine", "value")
    for row in check_rows(tasks, formulas, builtin, passes):
        table.add_row(*row)
    cli_console().print(table)

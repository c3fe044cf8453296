"""`spreadrl bench env`: Spreadsheet Gym latency and throughput."""

from __future__ import annotations

import typer
from rich.table import Table

from spreadrl.bench.env import env_rows
from spreadrl.cli.console import cli_console


def bench_env(
    episodes: int = typer.Option(40, "--episodes", help="Reference-solution episodes to replay."),
    concurrency: int = typer.Option(2, "--concurrency", help="Worker processes for the pool run."),
    split: str = typer.Option("test", "--split", help="Built-in split whose solutions to replay."),
    repeats: int = typer.Option(20, "--repeats", help="Repeats of each probe call."),
) -> None:
    """Per-tool latency, recalc and sandbox time, and episodes/s at concurrency 1 and C.

    Examples:

      spreadrl bench env

      spreadrl bench env --episodes 64 --concurrency 2
    """
    title, rows = env_rows(episodes, concurrency, split, repeats)
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for row in rows:
        table.add_row(*row)
    cli_console().print(table)

"""`spreadrl bench recalc-fidelity`: formula cells each engine reproduces against Excel's values."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from spreadrl.bench.recalc_fidelity import fidelity_report, run_fidelity
from spreadrl.cli.console import cli_console
from spreadrl.env.spreadsheet import recalc
from spreadrl.errors import SpreadrlError


def bench_recalc_fidelity(
    folder: Path = typer.Argument(
        ..., help="Folder of Excel-saved workbooks (searched recursively)."
    ),
    engine: list[str] = typer.Option(
        ["ironcalc"],
        "--engine",
        help="Engine to measure (repeat for several): ironcalc, libreoffice, hybrid.",
    ),
    worst: int = typer.Option(20, help="Mismatching cells to list per engine."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the full report here."),
) -> None:
    """Formula cells and workbooks reproduced per engine, against Excel's cached values.

    Examples:

      spreadrl bench recalc-fidelity data/recalc-corpus --engine ironcalc --engine hybrid
    """
    for name in engine:
        if name not in recalc.ENGINES:
            raise SpreadrlError(f"--engine {name!r}: choose from {', '.join(recalc.ENGINES)}")
    tallies, skipped = run_fidelity(folder, list(engine))
    console = cli_console()
    table = Table(title=f"recalculation fidelity on {folder} ({len(skipped)} files skipped)")
    for column in (
        "engine",
        "formula cells",
        "reproduced",
        "workbooks whole",
        "volatile skipped",
        "time",
    ):
        table.add_column(column, justify="right")
    for tally in tallies.values():
        table.add_row(
            tally.engine,
            str(tally.cells),
            f"{tally.reproduced} ({100 * tally.reproduced / max(tally.cells, 1):.2f}%)",
            f"{tally.workbooks_whole}/{tally.workbooks}",
            str(tally.volatile_skipped),
            f"{tally.seconds:.1f} s",
        )
    console.print(table)
    for tally in tallies.values():
        if tally.note:
            console.print(f"[yellow]{tally.engine}: {tally.note}[/yellow]")
        if len(tally.cell_engines) > 1 or tally.engine == "hybrid":
            console.print(f"{tally.engine}: cells produced by {dict(tally.cell_engines)}")
        worse = sorted(
            ((name, s) for name, s in tally.per_function.items() if s[1] < s[0]),
            key=lambda item: item[1][1] - item[1][0],
        )
        if worse:
            console.print(
                f"{tally.engine} functions with misses: "
                + ", ".join(f"{name} {s[1]}/{s[0]}" for name, s in worse[:25])
            )
        for miss in tally.misses[:worst]:
            console.print(
                f"  {tally.engine} miss {miss.workbook} {miss.sheet}!{miss.cell} {miss.formula[:80]}"
                f" expected {miss.expected!r} got {miss.actual!r} ({miss.engine})",
                markup=False,
            )
    if json_out is not None:
        report = fidelity_report(folder, tallies, skipped, worst)
        Path(json_out).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        console.print(f"report written to {json_out}")

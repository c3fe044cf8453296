"""`spreadrl data`: synthesize, import, inspect and locate task sets."""

from __future__ import annotations

from pathlib import Path

import typer

from spreadrl.cli import data_curate, data_sft
from spreadrl.cli.console import RichReporter, left_as_it_was, said_on_ctrl_c
from spreadrl.cli.data_curate import TASK_SET_HELP
from spreadrl.cli.data_info import render_summary
from spreadrl.data.builtin import builtin_tasks
from spreadrl.data.importers import copy_tasks, import_spreadsheet_rl, import_spreadsheetbench
from spreadrl.data.info import summarize_tasks
from spreadrl.data.sources import spreadsheet_tasks
from spreadrl.data.synth import describe_families, synthesize
from spreadrl.errors import SpreadrlError

app = typer.Typer(
    help="Task sets: synthesize, import SpreadsheetBench / Spreadsheet-RL, inspect, built-ins.",
    no_args_is_help=True,
)

IMPORT_SOURCES = ("spreadsheetbench", "spreadsheet-rl")
BUILTIN_SPLITS = ("train", "test", "demo-train", "demo-test")


def _csv(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


@app.command("synth")
def synth(
    out: Path = typer.Option(None, "--out", help="Folder to write the task set to."),
    n: int = typer.Option(None, "--n", min=1, help="How many tasks."),
    seed: int = typer.Option(0, "--seed", help="Same seed, same tasks."),
    families: str = typer.Option(None, "--families", help="Comma-separated family names."),
    difficulty: str = typer.Option(
        None, "--difficulty", help="Comma-separated levels (easy, medium, hard)."
    ),
    cases: int = typer.Option(None, "--cases", min=1, max=3, help="Cases per task (1-3)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
    list_families: bool = typer.Option(False, "--list", help="List the families and exit."),
) -> None:
    """Generate verified SpreadsheetBench-layout tasks, deterministically per seed.

    Examples:

      spreadrl data synth --list

      spreadrl data synth --out data/synth --n 200 --seed 1

      spreadrl data synth --out data/easy --n 50 --seed 2 --families aggregate,lookup \\
          --difficulty easy --cases 1
    """
    from spreadrl.cli.console import cli_console
    from spreadrl.env.spreadsheet.case_check import verify_case

    console = cli_console()
    if list_families:
        from rich.table import Table

        table = Table(title="Task families")
        table.add_column("family", no_wrap=True)
        table.add_column("type", no_wrap=True)
        table.add_column("difficulties")
        table.add_column("example", overflow="fold")
        for row in describe_families():
            table.add_row(
                row["name"],
                row["instruction_type"].split()[0],
                ", ".join(row["difficulties"]),
                row.get("example", ""),
            )
        console.print(table)
        return
    if out is None or n is None:
        raise SpreadrlError("data synth needs --out DIR and --n N (or --list)")
    with said_on_ctrl_c(left_as_it_was(out)):
        task_set = synthesize(
            out,
            n,
            seed,
            families=_csv(families),
            difficulty=_csv(difficulty),
            cases=cases,
            overwrite=overwrite,
            reporter=RichReporter(console),
            check=verify_case,
        )
    console.print(
        f"wrote {len(task_set)} tasks ({len(task_set.episodes())} cases) to {task_set.root}",
        markup=False,
    )


@app.command("import")
def import_(
    src: Path = typer.Argument(..., help="Local copy of the dataset (folder or parquet file)."),
    source: str = typer.Option(
        ..., "--from", help="Layout of SRC: spreadsheetbench or spreadsheet-rl."
    ),
    out: Path = typer.Option(..., "--out", help="Folder for the native layout."),
    split: str = typer.Option(
        None,
        "--split",
        help="Spreadsheet-RL split: train, test, test_2, test_verified or test_domain.",
    ),
    parser: str = typer.Option(
        None,
        "--parser",
        help="Spreadsheet-RL parquet variant: hermes (default) or qwen3_coder.",
    ),
    workbooks: Path = typer.Option(
        None,
        "--workbooks",
        help="Spreadsheet-RL: spreadsheets.zip or its unpacked folder, when not beside SRC.",
    ),
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="Skip broken tasks and list them instead of stopping."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
) -> None:
    """Convert a local SpreadsheetBench or Spreadsheet-RL copy into the native layout.

    SpreadsheetBench: the folder with dataset.json (release or Verified naming).
    Spreadsheet-RL: its download folder ({split}_{parser}.parquet files with
    spreadsheets.zip, zipped or unpacked), one parquet file, or the zip alone.
    Tasks start from each task folder's output.xlsx; the parquet's prompt is
    kept in the task's metadata.

    Examples:

      spreadrl data import --from spreadsheetbench ~/data/spreadsheetbench_verified_400 \\
          --out data/sb-verified

      spreadrl data import --from spreadsheet-rl ~/data/spreadsheet-rl --split test \\
          --out data/srl-test --skip-bad

      spreadrl data import --from spreadsheet-rl ~/pq/test_2_qwen3_coder.parquet \\
          --workbooks ~/data/spreadsheets.zip --out data/srl-test2
    """
    from rich.table import Table

    from spreadrl.cli.console import cli_console

    if source not in IMPORT_SOURCES:
        raise SpreadrlError(f"--from {source!r}: expected one of {', '.join(IMPORT_SOURCES)}")
    if source == "spreadsheetbench" and (split or parser or workbooks):
        raise SpreadrlError("--split, --parser and --workbooks apply to --from spreadsheet-rl only")
    with said_on_ctrl_c(left_as_it_was(out)):
        if source == "spreadsheetbench":
            report = import_spreadsheetbench(src, out, skip_bad=skip_bad, overwrite=overwrite)
        else:
            report = import_spreadsheet_rl(
                src,
                out,
                split=split,
                parser=parser,
                workbooks=workbooks,
                skip_bad=skip_bad,
                overwrite=overwrite,
            )
    console = cli_console()
    console.print(f"imported {report.imported} task(s) from {src} into {report.out}", markup=False)
    if report.skipped:
        table = Table(title=f"skipped {len(report.skipped)} task(s)", title_style="red")
        table.add_column("task")
        table.add_column("reason", overflow="fold")
        for problem in report.skipped:
            table.add_row(problem.task_id, problem.message)
        console.print(table)


@app.command("info")
def info(
    tasks_dir: Path = typer.Argument(..., help=TASK_SET_HELP),
    skip_bad: bool = typer.Option(
        False, "--skip-bad", help="Skip broken tasks and list them instead of stopping."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    cells: bool = typer.Option(
        False, "--cells", help="Also count non-empty input cells (opens every workbook)."
    ),
) -> None:
    """Summarize a task set: counts per type, source, family, difficulty; cases; sizes.

    Examples:

      spreadrl data info data/synth

      spreadrl data info data/sb --skip-bad --json > sb-summary.json
    """
    import json

    from spreadrl.cli.console import cli_console

    summary = summarize_tasks(spreadsheet_tasks(tasks_dir, skip_bad=skip_bad), count_cells=cells)
    if as_json:
        typer.echo(json.dumps(summary, indent=2, ensure_ascii=False))
        return
    cli_console().print(render_summary(summary))


@app.command("builtin")
def builtin(
    split: str = typer.Option("train", "--split", help="train, test, demo-train or demo-test."),
    out: Path = typer.Option(None, "--out", help="Copy the split here instead of printing."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
) -> None:
    """Print where a built-in split lives (building it on first use), or copy it to --out.

    Examples:

      spreadrl data builtin --split test

      spreadrl data builtin --split demo-train --out data/demo-train
    """
    from spreadrl.cli.console import cli_console

    if split not in BUILTIN_SPLITS:
        raise SpreadrlError(f"--split {split!r}: expected one of {', '.join(BUILTIN_SPLITS)}")
    task_set = builtin_tasks(split)
    console = cli_console()
    if out is None:
        console.print(f"built-in {split}: {len(task_set)} tasks")
        typer.echo(str(task_set.root))
        return

    with said_on_ctrl_c(left_as_it_was(out)):
        copied = copy_tasks(task_set, out, overwrite=overwrite)
    console.print(f"copied built-in {split} ({len(copied)} tasks) to {copied.root}", markup=False)


# Defined in its own module (it pulls in the rollout stack); registered here.
app.command("sft-build")(data_sft.sft_build)
# Download, filter and split (curating task sets) live in data_curate; registered here.
app.command("download")(data_curate.download)
app.command("filter")(data_curate.filter_tasks)
app.command("split")(data_curate.split)

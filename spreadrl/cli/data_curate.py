"""`spreadrl data download | filter | split`: public sets in, clean splits out.

Registered on the ``spreadrl data`` group by :mod:`spreadrl.cli.data`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spreadrl.cli.console import RichReporter, left_as_it_was, plain, said_on_ctrl_c
from spreadrl.data import filters
from spreadrl.data.download import DATASETS, download_dataset
from spreadrl.data.sources import spreadsheet_tasks
from spreadrl.data.split import parse_ratios, split_tasks
from spreadrl.env.config import check_engine_name
from spreadrl.errors import SpreadrlError

if TYPE_CHECKING:
    from rich.console import Console

TASK_SET_HELP = "Task set: a folder (with dataset.json) or builtin:<split>."


def download(
    name: str = typer.Argument(
        None,
        help="spreadsheet-rl, spreadsheetbench, spreadsheetbench-verified, deepscaler, "
        "omni-math, numina-math, taco or leetcode.",
    ),
    out: Path = typer.Option(None, "--out", help="Folder to write the set to."),
    split: str = typer.Option(None, "--split", help="Which split (default: the set's own)."),
    cache: Path = typer.Option(
        None, "--cache", help="Download cache (default $SPREADRL_CACHE or ~/.cache/spreadrl)."
    ),
    endpoint: str = typer.Option(
        None,
        "--endpoint",
        help="Plain file mirror replacing the default base URL "
        "(env: SPREADRL_ARCHIVE_ENDPOINT / SPREADRL_HUB_ENDPOINT).",
    ),
    data_files: list[Path] = typer.Option(
        None,
        "--data-files",
        help="Local copies of a hub split (.parquet/.jsonl; spreadsheet-rl: the split's "
        "parquet and, unless beside it, spreadsheets.zip): no network.",
    ),
    parser: str = typer.Option(
        None,
        "--parser",
        help="spreadsheet-rl: the parquet variant, hermes (default) or qwen3_coder "
        "(the tool-call format its prompt describes).",
    ),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip broken tasks and list them."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
    list_sets: bool = typer.Option(False, "--list", help="List the known sets and exit."),
) -> None:
    """Download a public task or problem set and convert it for spreadrl.

    Spreadsheet sets land in the native task layout; math/code sets as
    OUT/problems.jsonl. Offline (HF_HUB_OFFLINE=1 or no network) the error says
    how to fetch elsewhere and import the local copy.

    Examples:

      spreadrl data download spreadsheetbench-verified --out data/sb-verified

      spreadrl data download spreadsheet-rl --split test_verified --out data/srl-tv

      spreadrl data download spreadsheet-rl --split train --parser qwen3_coder --out data/srl

      spreadrl data download taco --out data/taco --data-files ~/taco/train.parquet
    """
    from spreadrl.cli.console import cli_console

    console = cli_console()
    if list_sets:
        _print_datasets(console)
        return
    if name is None or out is None:
        raise SpreadrlError("data download needs NAME and --out DIR (or --list)")
    _check_download_paths(out, cache, data_files or [], overwrite)
    report = download_dataset(
        name,
        out,
        split=split,
        cache=cache,
        endpoint=endpoint,
        data_files=data_files or None,
        overwrite=overwrite,
        skip_bad=skip_bad,
        reporter=RichReporter(),
        parser=parser,
    )
    what = "problems" if (report.out / "problems.jsonl").exists() else "tasks"
    console.print(
        f"wrote {report.count} {what} of {name} to {report.out} (from {report.origin})",
        markup=False,
    )
    for line in report.skipped[:20]:
        console.print(f"  [yellow]skipped[/] {plain(line)}", highlight=False, soft_wrap=True)
    if len(report.skipped) > 20:
        console.print(f"  ... and {len(report.skipped) - 20} more skipped")


def _print_datasets(console: Console) -> None:
    """The table of ``--list``: each known set, its splits, where it comes from, what it is."""
    from rich.table import Table

    table = Table(title="Downloadable sets")
    table.add_column("name", no_wrap=True)
    for column in ("splits", "source", "what"):
        table.add_column(column, overflow="fold")
    for spec in DATASETS.values():
        where = spec.repo_id or spec.archive or ""
        table.add_row(spec.name, ", ".join(spec.splits), where, spec.description)
    console.print(table)


def filter_tasks(
    tasks_dir: Path = typer.Argument(..., help=TASK_SET_HELP),
    out: Path = typer.Option(None, "--out", help="Folder for the kept tasks."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report counts; write nothing."),
    structure: bool = typer.Option(
        True, "--structure/--no-structure", help="Workbooks open, positions parse, not trivial."
    ),
    reproducible: bool = typer.Option(
        False, "--reproducible", help="Answer recalculated by our engine equals the saved one."
    ),
    dedup: float = typer.Option(
        None,
        "--dedup",
        min=0.01,
        max=1.0,
        help="Drop near-duplicate instructions at this "
        "similarity (Jaccard of word 3-grams; 1.0 = exact after normalising).",
    ),
    tokenizer: Path = typer.Option(None, "--tokenizer", help="Local tokenizer folder."),
    max_prompt_tokens: int = typer.Option(
        None,
        "--max-prompt-tokens",
        min=1,
        help="Drop prompts longer than this (needs --tokenizer).",
    ),
    pass_rates: Path = typer.Option(
        None, "--pass-rates", help="Eval run folder with trajectories.jsonl (K samples per task)."
    ),
    min_pass: float = typer.Option(0.0, "--min-pass", min=0.0, max=1.0),
    max_pass: float = typer.Option(1.0, "--max-pass", min=0.0, max=1.0),
    engine: str = typer.Option(
        "hybrid",
        "--engine",
        help="Recalculation engine: hybrid (the reward's), ironcalc, libreoffice.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Filter a task set; every filter reports what it removed and why.

    Examples:

      spreadrl data filter data/srl-train --out data/srl-clean --reproducible --dedup 0.9

      spreadrl data filter data/srl-clean --dry-run --tokenizer models/qwen3-4b \\
          --max-prompt-tokens 4096

      spreadrl data filter data/srl-clean --out data/srl-band --no-structure \\
          --pass-rates runs/eval-k8 --min-pass 0.1 --max-pass 0.9
    """
    import json

    check_engine_name(engine, "--engine")
    if out is None and not dry_run:
        raise SpreadrlError("data filter needs --out DIR (or --dry-run)")
    if (tokenizer is None) != (max_prompt_tokens is None):
        raise SpreadrlError("--tokenizer and --max-prompt-tokens go together")
    chosen = _chosen_filters(
        engine=engine,
        structure=structure,
        reproducible=reproducible,
        tokenizer=tokenizer,
        max_prompt_tokens=max_prompt_tokens,
        pass_rates=pass_rates,
        pass_band=(min_pass, max_pass),
        dedup=dedup,
    )
    task_set = spreadsheet_tasks(tasks_dir, skip_bad=True)
    with said_on_ctrl_c("stopped: nothing was written" if dry_run else left_as_it_was(out)):
        report = filters.apply_filters(
            task_set,
            filters.default_order(chosen),
            None if dry_run else out,
            overwrite=overwrite,
            reporter=None if as_json else RichReporter(),
        )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return
    _print_filter_report(tasks_dir, report)


def _chosen_filters(
    *,
    engine: str,
    structure: bool,
    reproducible: bool,
    tokenizer: Path | None,
    max_prompt_tokens: int | None,
    pass_rates: Path | None,
    pass_band: tuple[float, float],
    dedup: float | None,
) -> list[filters.Filter]:
    """The filters the flags ask for (in flag order; ``apply_filters`` orders them)."""
    from spreadrl.env.spreadsheet.task_filters import ReproducibleFilter, StructureFilter

    chosen: list[filters.Filter] = []
    if structure:
        chosen.append(StructureFilter(engine))
    if reproducible:
        chosen.append(ReproducibleFilter(engine))
    if tokenizer is not None and max_prompt_tokens is not None:
        chosen.append(
            filters.PromptLengthFilter(filters.load_tokenizer(tokenizer), max_prompt_tokens)
        )
    if pass_rates is not None:
        chosen.append(filters.PassRateFilter(filters.load_pass_rates(pass_rates), *pass_band))
    if dedup is not None:
        chosen.append(filters.DedupFilter(dedup))
    if not chosen:
        raise SpreadrlError("no filter chosen; see `spreadrl data filter --help`")
    return chosen


def _print_filter_report(tasks_dir: Path, report: filters.FilterReport) -> None:
    """The counts per filter, the first 30 removed tasks with why, and where the rest went."""
    from rich.table import Table

    from spreadrl.cli.console import cli_console

    console = cli_console()
    table = Table(title=f"{tasks_dir}: kept {len(report.kept)} of {report.total}")
    table.add_column("filter")
    table.add_column("removed", justify="right")
    for name, count in report.counts.items():
        table.add_row(name, str(count))
    console.print(table)
    for task_id, reasons in list(report.removed.items())[:30]:
        console.print(
            f"  [red]{plain(task_id)}[/]: {plain('; '.join(reasons))}",
            highlight=False,
            soft_wrap=True,
        )
    if len(report.removed) > 30:
        console.print(f"  ... and {len(report.removed) - 30} more (see --json)")
    if report.out is not None:
        console.print(f"wrote {len(report.kept)} tasks to {report.out}", markup=False)
    else:
        console.print("dry run: nothing written")


def split(
    tasks_dir: Path = typer.Argument(..., help=TASK_SET_HELP),
    out: Path = typer.Option(..., "--out", help="Folder for train/, val/, test/."),
    ratios: str = typer.Option("0.8,0.1,0.1", "--ratios", help="train,val,test fractions."),
    seed: int = typer.Option(0, "--seed", help="Same seed, same splits."),
    dedup: float = typer.Option(
        0.9, "--dedup", min=0.01, max=1.0, help="Near-duplicate similarity kept in one split."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out."),
) -> None:
    """Deterministic train/val/test splits; near-duplicate instructions never cross splits.

    Examples:

      spreadrl data split data/srl-clean --out data/srl-splits --ratios 0.8,0.1,0.1 --seed 0
    """
    from spreadrl.cli.console import cli_console

    task_set = spreadsheet_tasks(tasks_dir)
    with said_on_ctrl_c(left_as_it_was(out)):
        report = split_tasks(
            task_set,
            out,
            ratios=parse_ratios(ratios),
            seed=seed,
            threshold=dedup,
            overwrite=overwrite,
        )
    counts = ", ".join(f"{name} {len(ids)}" for name, ids in report.splits.items())
    console = cli_console()
    console.print(
        f"split {tasks_dir} into {counts} (seed {seed}; "
        f"{len(report.clusters)} near-duplicate clusters kept whole) under {out}",
        markup=False,
    )
    empty = [name for name, ids in report.splits.items() if not ids]
    if empty:  # an empty split evaluates or trains on nothing: say so now, not at its use
        console.print(
            f"[yellow]warning:[/] {plain(', '.join(empty))} got no tasks "
            f"({sum(map(len, report.splits.values()))} tasks in all); "
            "use more tasks or other --ratios",
            soft_wrap=True,
        )


def _check_download_paths(
    out: Path, cache: Path | None, files: list[Path], overwrite: bool
) -> None:
    """A file where a folder goes, or a local copy that is no file, is one line before any fetch."""
    from spreadrl.data.download import foreign_to_download
    from spreadrl.run_folder import check_output_folder

    check_output_folder(out, overwrite=overwrite, written_by=foreign_to_download)
    if cache is not None:
        check_output_folder(cache, overwrite=True, flag="--cache")
    for file in files:
        if not file.is_file():
            what = "a folder" if file.is_dir() else "not found"
            raise SpreadrlError(f"--data-files {file}: {what}; give a .parquet or .jsonl file")

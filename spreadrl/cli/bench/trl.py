"""`spreadrl bench trl`: TRL's GRPOTrainer beside spreadrl's GRPO step, same model and shape."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table

from spreadrl.bench.trl import COLUMNS, SMOKE, Shape, run_trl_bench, shape_line, table_rows
from spreadrl.cli.console import RichReporter, cli_console
from spreadrl.run_folder import check_output_folder


def bench_trl(
    steps: int = typer.Option(4, help="GRPO steps per run (the first is a warm-up)."),
    rounds: int = typer.Option(2, help="Runs per system, alternating TRL and spreadrl."),
    prompts: int = typer.Option(8, help="Prompts per step."),
    group: int = typer.Option(4, help="Rollouts per prompt."),
    new_tokens: int = typer.Option(128, help="New tokens per rollout (one turn)."),
    systems: str = typer.Option("trl,spreadrl", help="Which systems to run, comma-separated."),
    threads: int = typer.Option(0, help="torch threads per run (0 = torch's default)."),
    micro_batch_tokens: int = typer.Option(
        65536, help="spreadrl's update micro-batch token budget (65536: one micro-batch)."
    ),
    same_prompt: bool = typer.Option(
        True,
        "--same-prompt/--instruction-prompt",
        help="TRL gets spreadrl's rendered episode openings, the same token ids (equal "
        "work), or only the bare task instruction.",
    ),
    both_modes: bool = typer.Option(
        False, help="Run TRL in both prompt modes in the same alternating rounds."
    ),
    async_staleness: int = typer.Option(
        0,
        help="Also run spreadrl's asynchronous GRPO with this rollout.max_staleness "
        "(0: only the synchronous trainer).",
    ),
    smoke: bool = typer.Option(False, help="A tiny shape and 2 steps: checks that both run."),
    out: Path = typer.Option(None, help="Keep the runs here (default: a temporary folder)."),
) -> None:
    """TRL GRPOTrainer vs spreadrl grpo on one model and one step shape, in alternating subprocesses.

    Prints s/step, tokens/s, generated tokens/s and peak RSS per system, and their
    ratios. By default TRL starts from the very prompt ids spreadrl's episodes start
    with (tool schema, instruction, workbook overview); --instruction-prompt gives it
    the bare instruction instead, --both-modes runs both. Needs the bench extra for
    the TRL half: pip install 'spreadrl[bench]'.

    Examples:

      spreadrl bench trl --smoke

      spreadrl bench trl --steps 4 --rounds 2 --both-modes
    """
    if out is not None:  # a file in its place is one line before any run
        check_output_folder(
            out,
            overwrite=False,
            remedy="a benchmark runs fresh (an earlier run there would be resumed): choose a new folder",
        )
    console = cli_console()
    if not console.is_terminal:  # piped into a file or docs: room for every column
        console = cli_console(width=160)
    shape = SMOKE if smoke else Shape(prompts, group, new_tokens, steps)
    shape = replace(shape, micro_batch_tokens=micro_batch_tokens, same_prompt=same_prompt)
    chosen = [s.strip() for s in systems.split(",") if s.strip()]
    summary, same = run_trl_bench(
        shape,
        chosen,
        both_modes=both_modes,
        rounds=1 if smoke else rounds,
        async_staleness=async_staleness,
        threads=threads,
        out=out,
        reporter=RichReporter(console),
    )
    table = Table("system", *(title for _, title, _ in COLUMNS))
    for row in table_rows(summary):
        table.add_row(*row)
    console.print(table)
    console.print(shape_line(shape, summary, same))

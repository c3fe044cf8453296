"""`spreadrl demo`: the end-to-end CPU demo that `make run` starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from spreadrl.cli.console import cli_console


def demo(
    out: Path = typer.Option(
        Path("runs/demo"),
        help="Run folder: new or empty, or an earlier demo's (only what that demo wrote is "
        "replaced).",
    ),
    seed: int = typer.Option(0),
    sft_max_steps: int = typer.Option(200, help="Most SFT optimizer steps."),
    sft_target_pass: float = typer.Option(
        0.5, help="Stop SFT once the sampled pass rate on training tasks reaches this."
    ),
    grpo_steps: int = typer.Option(60, help="GRPO steps."),
    eval_samples: int = typer.Option(4, help="Samples per held-out case."),
    config: str = typer.Option(
        "tiny-cpu", help="GRPO recipe for the RL stage: a YAML file or a shipped recipe's name."
    ),
    smoke: bool = typer.Option(
        False,
        "--smoke",
        help="Every stage at a tiny size (4 training tasks, 2 SFT steps, 1 GRPO step), well "
        "under a minute: checks the pipeline runs, measures nothing. Replaces the size options.",
    ),
) -> None:
    """Synthesize tasks, build a tiny Qwen3, SFT, GRPO-TCR, and compare held-out pass@1.

    Runs on CPU in minutes with no downloads. Example:

      spreadrl demo --out runs/demo --grpo-steps 60

      spreadrl demo --smoke --out runs/demo-smoke
    """
    from spreadrl.cli.console import RichReporter
    from spreadrl.demo import DemoSettings, run_demo

    if smoke:
        settings = DemoSettings.smoke(out=out, seed=seed, grpo_config=config)
    else:
        settings = DemoSettings(
            out=out,
            seed=seed,
            sft_max_steps=sft_max_steps,
            sft_target_pass=sft_target_pass,
            grpo_steps=grpo_steps,
            eval_samples=eval_samples,
            grpo_config=config,
        )
    console = cli_console()
    print_summary(run_demo(settings, RichReporter(console)), console)


def print_summary(summary: dict[str, Any], console: Console) -> None:
    """One short result block, then the command to look at the run (details: summary.md)."""
    from rich.markup import escape
    from rich.panel import Panel

    before, after = summary["sft"], summary["grpo"]
    out = escape(summary["settings"]["out"])  # a path, inside markup lines
    improved = summary["delta_pass@1"] - summary["delta_ci95"] > 0
    verdict = "[green]GRPO improved on SFT[/]" if improved else "[yellow]no significant change[/]"
    minutes = sum(summary["timings_s"].values()) / 60
    lines = [
        f"held-out pass@1  SFT {100 * before['pass@1']:.1f}% ± {100 * before['pass@1_ci95']:.1f}"
        f"  ->  GRPO [bold]{100 * after['pass@1']:.1f}%[/] ± {100 * after['pass@1_ci95']:.1f}",
        f"change {100 * summary['delta_pass@1']:+.1f} points ± {100 * summary['delta_ci95']:.1f}"
        f" over {summary['paired_cases']} paired cases: {verdict}",
        f"{minutes:.1f} min in all; per family and stage: {out}/summary.md",
        f"look at the run:  [bold cyan]spreadrl view {out}[/]",
    ]
    if console.is_terminal:
        console.print(Panel("\n".join(lines), title="spreadrl demo", expand=False))
        return
    # a log or a pipe: the same lines unboxed, as a panel wraps its text (and a path) at its width
    console.print("[bold]spreadrl demo[/]", soft_wrap=True)
    for line in lines:
        console.print(line, soft_wrap=True)

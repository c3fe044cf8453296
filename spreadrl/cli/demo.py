"""`spreadrl demo`: the end-to-end CPU demo that `make run` starts."""

from __future__ import annotations

from pathlib import Path

import typer


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
    from rich.console import Console

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
    run_demo(settings, Console())

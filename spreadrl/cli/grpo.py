"""`spreadrl grpo`: GRPO / GRPO-TCR training from a YAML recipe with dotted overrides."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from spreadrl.reporting import Reporter
    from spreadrl.train.config import GRPOConfig


def grpo(
    overrides: list[str] = typer.Argument(
        None, help="Dotted overrides, e.g. optim.lr=2e-6 steps=10."
    ),
    config: Path = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML recipe, or a shipped recipe's name (spreadrl config list).",
    ),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved config and exit."
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue the run in output_dir with changed steps, epochs, logging or checkpoint "
        "cadence (the same settings resume without it; other changes need a new output_dir).",
    ),
) -> None:
    """Train a policy with GRPO(-TCR) on spreadsheet tasks.

    Examples:

      spreadrl grpo --config configs/tiny-cpu.yaml

      spreadrl grpo --config configs/spreadsheet-rl-4b.yaml optim.lr=2e-6 rollout.group_size=8

      torchrun --nproc-per-node 4 -m spreadrl grpo --config configs/grpo-tcr-4b.yaml
    """
    from spreadrl.cli.recipe import run_recipe
    from spreadrl.train.config import GRPOConfig

    run_recipe("grpo", GRPOConfig, _train, config, overrides, print_config, resume)


def _train(cfg: GRPOConfig, reporter: Reporter) -> Path:
    """The trainer, imported (torch, transformers) only once the recipe was checked."""
    from spreadrl.train.grpo import train_grpo

    return train_grpo(cfg, reporter=reporter)

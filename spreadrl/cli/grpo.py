"""`spreadrl grpo`: GRPO / GRPO-TCR training from a YAML recipe with dotted overrides."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spreadrl.cli.recipe import PrintConfigOption, RecipeOption, ResumeOption

if TYPE_CHECKING:
    from spreadrl.reporting import Reporter
    from spreadrl.train.config import GRPOConfig


def grpo(
    overrides: list[str] = typer.Argument(
        None, help="Dotted overrides, e.g. optim.lr=2e-6 steps=10."
    ),
    config: RecipeOption = None,
    print_config: PrintConfigOption = False,
    resume: ResumeOption = False,
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

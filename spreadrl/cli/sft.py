"""`spreadrl sft`: supervised cold start on agent trajectories."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spreadrl.cli.recipe import PrintConfigOption, RecipeOption, ResumeOption

if TYPE_CHECKING:
    from spreadrl.reporting import Reporter
    from spreadrl.train.config import SFTConfig


def sft(
    overrides: list[str] = typer.Argument(
        None, help="Dotted overrides, e.g. optim.lr=1e-5 steps=100."
    ),
    config: RecipeOption = None,
    print_config: PrintConfigOption = False,
    resume: ResumeOption = False,
) -> None:
    """Fine-tune on multi-turn agent trajectories (loss on assistant tokens only).

    Examples:

      spreadrl data sft-build --tasks builtin:demo-train --out runs/sft.jsonl

      spreadrl sft --config sft-tiny-cpu model.name_or_path=runs/tiny data.path=runs/sft.jsonl

      spreadrl sft --config sft-tiny-cpu steps=200 output_dir=runs/sft-200
    """
    from spreadrl.cli.recipe import run_recipe
    from spreadrl.train.config import SFTConfig

    run_recipe("sft", SFTConfig, _train, config, overrides, print_config, resume)


def _train(cfg: SFTConfig, reporter: Reporter) -> Path:
    """The trainer, imported (torch, transformers) only once the recipe was checked."""
    from spreadrl.train.sft import train_sft

    return train_sft(cfg, reporter=reporter)

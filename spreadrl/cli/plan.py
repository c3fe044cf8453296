"""`spreadrl plan`: a GRPO recipe's memory and time per GPU, before booking a node."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spreadrl.config import load_config
from spreadrl.errors import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

    from spreadrl.plan import Plan
    from spreadrl.train.config import GRPOConfig


def plan(
    recipe: Path = typer.Argument(..., help="YAML recipe (see configs/)."),
    overrides: list[str] = typer.Argument(None, help="Dotted overrides, e.g. optim.lr=2e-6."),
    gpus: int = typer.Option(1, "--gpus", help="GPUs the run uses (torchrun ranks)."),
    gpu_memory: float = typer.Option(
        79.6, "--gpu-memory", help="GiB per GPU as torch reports it (H100 80GB: 79.6)."
    ),
    shape: str = typer.Option(
        None,
        "--shape",
        help="Model dimensions of a `spreadrl model init` preset (4b-shape: Qwen3-4B, "
        "vocabulary 151,936) instead of model.name_or_path's config.json.",
    ),
    mfu: float = typer.Option(0.35, "--mfu", help="Model FLOPs utilisation assumed for times."),
) -> None:
    """Print the per-GPU memory and time plan of a GRPO recipe; exit 2 if it cannot fit.

    No GPU is needed: the model is built on the meta device from its config. Each
    phase's peak is what the device holds (allocated, the allocator's reserve, the
    CUDA context); it fits when it leaves a stated margin free.

    Examples:

      spreadrl plan configs/spreadsheet-rl-4b.yaml --gpus 4 --shape 4b-shape

      spreadrl plan configs/grpo-tcr-4b.yaml model.name_or_path=runs/4b --gpus 1
    """
    from spreadrl.train.config import GRPOConfig, check_recipe_kind

    if gpus < 1 or gpu_memory <= 0 or not 0 < mfu <= 1:
        raise ConfigError(
            f"--gpus must be >= 1, --gpu-memory > 0 and --mfu in (0, 1], got {gpus}, "
            f"{gpu_memory}, {mfu}"
        )
    check_recipe_kind("grpo", recipe)  # plans GRPO recipes; an SFT one is named as such
    cfg = load_config(GRPOConfig, recipe, overrides or [])  # checked before torch loads
    from spreadrl.cli.console import cli_console
    from spreadrl.plan import Hardware, plan_recipe

    result = plan_recipe(cfg, Hardware(gpus, gpu_memory, mfu=mfu), shape_name=shape)
    if not result.fits and all(gib <= gpu_memory for gib in result.phases.values()):
        # memory is not what stops it (e.g. the prompts do not divide over the ranks):
        # a table of "fits" rows above "does not fit" would contradict itself
        raise ConfigError(f"{recipe}: cannot run on {gpus} GPUs; " + "; ".join(result.problems))
    cli_console().print(
        _plan_table(f"{recipe.name} on {gpus} x {gpu_memory:g} GiB", cfg, result, shape)
    )
    if not result.fits:
        raise ConfigError(f"{recipe}: does not fit; " + "; ".join(result.problems))


def _plan_table(title: str, cfg: GRPOConfig, result: Plan, shape: str | None) -> Table:
    """The plan as one table: the components, each phase's peak and verdict, the host
    memory, the engine's lines (vLLM's KV tokens) and the checkpointing that fits, then the times."""
    from rich.table import Table

    table = Table(title=f"{title}: per GPU")
    table.add_column("")
    table.add_column("GiB", justify="right")
    table.add_column("")
    for name, gib, note in result.components:
        table.add_row(name, f"{gib:.2f}", note)
    table.add_section()
    for phase, gib in result.phases.items():
        verdict = result.verdict(phase)
        colour = "green" if verdict.startswith("fits") else "red"
        allocated = result.allocated[phase]
        table.add_row(
            f"peak: {phase}", f"{gib:.1f}", f"[{colour}]{verdict}[/] ({allocated:.1f} allocated)"
        )
    if result.host_gib:
        table.add_row(
            "CPU memory (offload)",
            f"{result.host_gib:.1f}",
            "per process: weights, gradients, AdamW state, KL reference (model.cpu_offload)",
        )
    for row in result.engine_lines:  # the rollout engine's own figures (vLLM: KV tokens)
        table.add_row(*row)
    if cfg.model.gradient_checkpointing:
        from spreadrl.plan import (
            largest_checkpoint_every,
            load_model_config,
            model_shape,
            preset_config,
        )

        config = preset_config(shape) if shape else load_model_config(cfg.model.name_or_path)
        every = largest_checkpoint_every(cfg, model_shape(config), result.hardware)
        table.add_row(
            "model.checkpoint_every that fits",
            "-" if every is None else str(every),
            "recompute every k-th layer only (selective checkpointing)",
        )
    table.add_section()
    for name, value in result.times:
        table.add_row(name, value, "")
    return table

"""The shared body of the two training commands (`spreadrl grpo`, `spreadrl sft`).

Both resolve a recipe, optionally print it, and train with the same guarantees: a
start that fails leaves no output folder behind, and SIGINT / SIGTERM after a saved
step exits 0 with the command that resumes. One function keeps the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from spreadrl.cli.console import cli_console

# The options the two training commands share, declared once.
RecipeOption = Annotated[
    Path,
    typer.Option(
        "--config",
        "-c",
        help="YAML recipe, or a shipped recipe's name (spreadrl config list).",
    ),
]
PrintConfigOption = Annotated[
    bool, typer.Option("--print-config", help="Print the resolved config and exit.")
]
ResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="Continue the run in output_dir with changed steps, epochs, logging or checkpoint "
        "cadence (the same settings resume without it; other changes need a new output_dir).",
    ),
]


def run_recipe(
    command: str,
    config_type: type,
    train: Callable[..., Path],
    config: Path | None,
    overrides: list[str] | None,
    print_config: bool,
    resume: bool = False,
) -> None:
    """Resolve `config` + `overrides` into `config_type`, then print it or train with it.

    ``resume`` (``--resume``) continues the run in ``output_dir`` although settings that
    are safe to change (``steps``, logging, checkpoint cadence) differ from its
    ``run.json``; the same settings resume without it.
    """
    from spreadrl.cli.console import RichReporter, plain
    from spreadrl.cli.outdir import TRAINING_RESULTS, removed_if_failed_start
    from spreadrl.cli.resume import print_stopped
    from spreadrl.config import dump_config, load_config
    from spreadrl.errors import RunStopped
    from spreadrl.rollout.allocator import use_expandable_segments

    if config is not None:  # `sft --config tiny-cpu`: name the command the recipe is for
        from spreadrl.train.config import check_recipe_kind

        check_recipe_kind(command, config)
    cfg: Any = load_config(config_type, config, overrides or [])
    console = cli_console()
    if print_config:
        console.print(dump_config(cfg), highlight=False, markup=False)
        return
    from spreadrl.run_folder import check_creatable

    if os.environ.get("RANK", "0") == "0":  # one line, before torch is imported (main rank)
        check_creatable(Path(cfg.output_dir), "output_dir")
    # the trainer's allocator: expandable segments unless the user set it (before CUDA starts)
    use_expandable_segments(getattr(getattr(cfg, "rollout", None), "backend", None))
    # a start that fails (a bad model path, a bad data row) leaves no output folder
    with removed_if_failed_start(Path(cfg.output_dir), TRAINING_RESULTS):
        if resume and os.environ.get("RANK", "0") == "0":  # torchrun: the main rank records
            from spreadrl.config import section_dict
            from spreadrl.train.setup import claim_training_folder

            claim_training_folder(cfg, section_dict(cfg), resume_changes=True)
        try:
            final = train(cfg, reporter=RichReporter(console))
        except RunStopped as stopped:  # SIGINT / SIGTERM: a whole step saved; exit 0
            print_stopped(console, stopped, command, config, overrides or [])
            return
        except OSError as exc:  # a full disk between checkpoints: one line, what a rerun does
            from spreadrl.train.checkpoint import disk_full_error

            full = disk_full_error(exc, cfg.checkpoint.root(cfg.output_dir))
            if full is None:
                raise
            raise full from exc
    console.print(f"[green]done[/]: final model in {plain(final)}")

"""The one line `spreadrl grpo` / `spreadrl sft` print when a signal stopped the run.

A stopped run is not an error: the checkpoint is whole and the same command
resumes from it, so the line says where the checkpoint is and gives that
command, and the process exits 0.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from spreadrl.errors import RunStopped


def resume_command(command: str, config: Path | None, overrides: list[str]) -> str:
    """The command that resumes the run: the same recipe and overrides, the same launcher.

    Under torchrun the world size may differ on resume (the optimizer state is
    resharded); other launch flags (nodes, rendezvous) are the user's own.
    """
    args = [command]
    if config is not None:
        args += ["--config", str(config)]
    tail = shlex.join([*args, *overrides])
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return f"spreadrl {tail}"
    world = os.environ.get("WORLD_SIZE", "1")
    local = os.environ.get("LOCAL_WORLD_SIZE", world)
    launch = f"--nproc-per-node {local}" if local == world else "<the same launch flags>"
    return f"torchrun {launch} -m spreadrl {tail}"


def print_stopped(
    console: Console, stopped: RunStopped, command: str, config: Path | None, overrides: list[str]
) -> None:
    if stopped.announce:
        resume = resume_command(command, config, overrides)
        console.print(
            f"[yellow]{escape(stopped.message)}[/]; resume: {escape(resume)}",
            highlight=False,
            soft_wrap=True,
        )

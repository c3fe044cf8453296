"""What a training run folder is (``run.json``), and the log rows a resumed run takes back.

A GRPO or SFT run folder is one run: the same command and resolved recipe
resume it from its newest checkpoint; another recipe is refused, naming each
setting that differs (:mod:`spreadrl.run_folder`). ``--resume`` continues a run
with changes to the settings in :data:`TRAINING_SAFE` only: how long it trains
and how it logs and checkpoints, none of which changes what a step computes.
"""

from __future__ import annotations

from pathlib import Path

from spreadrl.config import section_dict
from spreadrl.run_folder import Claim, RunIdentity, claim_run_folder, cut_back_jsonl, flatten
from spreadrl.train.config import GRPOConfig, SFTConfig

TRAINING_FILES = ("metrics.jsonl", "trajectories.jsonl", "checkpoints", "final")
"""What a training run writes in its folder; once one is non-empty, the folder holds a run."""

TRAINING_SAFE = ("steps", "epochs", "logging.", "checkpoint.every_steps", "checkpoint.keep")
"""Settings ``--resume`` may change: the length of the run, its logging and checkpoint cadence."""

LOGS = ("metrics.jsonl", "trajectories.jsonl")
"""The logs a run appends to once per step (cut back to the checkpoint on resume)."""


def training_identity(cfg: GRPOConfig | SFTConfig) -> RunIdentity:
    """The run ``cfg`` describes: its command, and every setting but the folder itself."""
    resolved = section_dict(cfg)
    settings = flatten(resolved)
    settings.pop("output_dir", None)  # a run folder may be moved and still resume
    if isinstance(cfg, GRPOConfig):
        command, summary = "grpo", {"model": cfg.model.name_or_path, "tasks": cfg.data.train_tasks}
    else:
        command, summary = "sft", {"model": cfg.model.name_or_path, "data": cfg.data.path}
    return RunIdentity(
        command=command,
        settings=settings,
        files=TRAINING_FILES,
        safe=TRAINING_SAFE,
        summary=summary,
    )


def claim_training_folder(
    cfg: GRPOConfig | SFTConfig, *, resume_changes: bool = False, write: bool = True
) -> Claim:
    """Claim ``cfg.output_dir`` for this run (see :func:`spreadrl.run_folder.claim_run_folder`)."""
    identity = training_identity(cfg)
    return claim_run_folder(
        Path(cfg.output_dir),
        identity,
        resume_changes=resume_changes,
        elsewhere="output_dir=NEW_FOLDER",
        write=write,
    )


def cut_back_logs(out: Path, step: int) -> int:
    """Drop the rows of the run's logs after ``step`` (0: a run with no checkpoint starts over)."""
    return sum(cut_back_jsonl(out / name, step) for name in LOGS)

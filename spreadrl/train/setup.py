"""What the SFT and GRPO recipes set up alike: the run (folder, process group, seeds,
precision, checkpoints). The model they train is built by :mod:`spreadrl.train.trained_model`.

What a training run folder is (``run.json``), and the log rows a resumed run takes back.

A GRPO or SFT run folder is one run: the same command and resolved recipe
resume it from its newest checkpoint; another recipe is refused, naming each
setting that differs (:mod:`spreadrl.run_folder`). ``--resume`` continues a run
with changes to the settings in :data:`TRAINING_SAFE` only: how long it trains
and how it logs and checkpoints, none of which changes what a step computes.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from transformers import PreTrainedTokenizerBase

from spreadrl.config import ConfigRecord, YAMLValue
from spreadrl.errors import ConfigError, RunStopped, SpreadrlError
from spreadrl.reporting import Reporter
from spreadrl.run_folder import Claim, RunIdentity, claim_run_folder, cut_back_jsonl, flatten
from spreadrl.train.checkpoint import (
    SAVE_ERRORS,
    CheckpointSaveError,
    TrainerState,
    checkpoint_folder,
    checkpoint_step,
    find_resume_point,
    os_error_of,
    save_checkpoint,
    save_failure_reason,
    save_model,
)
from spreadrl.train.config import (
    CheckpointConfig,
    GRPOConfig,
    SFTConfig,
)
from spreadrl.train.distributed import DistInfo, cleanup, init_distributed
from spreadrl.train.precision import Precision, resolve_precision
from spreadrl.train.timeouts import collective_timeout_s
from spreadrl.train.tracking import MetricsLog, build_metrics_log

RecipeConfig = GRPOConfig | SFTConfig
"""A training recipe's whole config: what a run folder records and resumes."""


def resolve_device(name: str) -> str:
    """ "auto" picks cuda when present; asking for cuda without a GPU is a clear error."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SpreadrlError(f"device={name!r} but no CUDA GPU is visible; use device=cpu")
    return name


@dataclass
class Run:
    """What the SFT and GRPO recipes set up alike: the run folder, the process group,
    the resume point, and checkpoints (every N steps, and on SIGINT / SIGTERM).

    Built by :meth:`start`; afterwards it reads only its own sections
    (``checkpoint``), never the whole config again."""

    info: DistInfo
    precision: Precision  # the run's dtypes: weights loaded in, compute in
    out: Path
    reporter: Reporter  # where the run's lines go (the CLI's console)
    checkpoint: CheckpointConfig
    ckpt_root: Path
    resume_from: Path | None
    metrics: MetricsLog
    save_end: bool = True  # False: neither the end state nor the final model (a benchmark)

    @classmethod
    def start(
        cls,
        cfg: RecipeConfig,
        record: ConfigRecord,
        reporter: Reporter,
        *,
        seed_per_rank: bool = False,
        rollout_wait_s: float = 0.0,
        save_end: bool = True,
    ) -> Run:
        """Join the process group, write ``config.yaml``, seed, resolve the run's precision,
        find the resume point.

        ``record``: ``cfg`` turned into plain data once by the recipe
        (:func:`spreadrl.config.config_record`): the run folder's record (``run.json``),
        ``config.yaml`` and the trackers' config; the rest of the run gets sections.
        ``rollout_wait_s``: how much longer one rank's episodes may keep it than another's
        (:func:`~spreadrl.train.timeouts.rollout_wait_s`), added to the collective timeout."""
        device = resolve_device(cfg.device)
        info = init_distributed(device, timeout_s=collective_timeout_s(rollout_wait_s))
        out = Path(cfg.output_dir)
        if info.is_main:  # one run per folder: refuse another run's folder (run.json)
            claim_training_folder(cfg, record.data)
        out.mkdir(parents=True, exist_ok=True)
        if info.is_main:
            (out / "config.yaml").write_text(record.yaml)
        seed = cfg.seed + (info.rank if seed_per_rank else 0)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        root = cfg.checkpoint.root(cfg.output_dir)
        resume_from, skipped = find_resume_point(root)
        for line in skipped if info.is_main else ():
            reporter.line(line, level="warning")
        if resume_from is not None and info.is_main:
            reporter.line(f"resuming from {resume_from} at step {checkpoint_step(resume_from)}")
        if info.is_main:  # the steps after the checkpoint are logged again: no row twice
            cut_back_logs(out, checkpoint_step(resume_from) if resume_from else 0)
        return cls(
            info=info,
            precision=resolve_precision(cfg.model.dtype, device, lora=cfg.model.lora.enabled),
            out=out,
            reporter=reporter,
            checkpoint=cfg.checkpoint,
            ckpt_root=root,
            resume_from=resume_from,
            metrics=build_metrics_log(cfg.logging, out, record.data, main=info.is_main),
            save_end=save_end,
        )

    def save(self, step: int, parts: Checkpointed, extra: dict[str, object]) -> None:
        save_checkpoint(
            self.ckpt_root,
            step,
            parts.model,
            parts.tokenizer,
            parts.optimizer,
            parts.scheduler,
            extra,
            keep=self.checkpoint.keep,
            info=self.info,
        )

    def maybe_save(self, step: int, parts: Checkpointed, extra: dict[str, object]) -> bool:
        """Save every ``checkpoint.every_steps`` steps; return whether this step was saved."""
        every = self.checkpoint.every_steps
        if every and step % every == 0:
            self.save(step, parts, extra)
            return True
        return False

    def stop(
        self,
        signal_name: str,
        step: int,
        total: int,
        saved: bool,
        parts: Checkpointed,
        extra: dict[str, object],
    ) -> RunStopped:
        """Save ``step`` (unless ``saved`` already) on every rank; the exception to raise.

        Called on every rank after the same step (see :class:`spreadrl.train.signals.StopSignals`).
        """
        if not saved:
            self.save(step, parts, extra)
        self.metrics.close()
        self.close()
        folder = checkpoint_folder(self.ckpt_root, step)
        ranks = f" on all {self.info.world_size} ranks" if self.info.enabled else ""
        message = f"stopped by {signal_name} after step {step}/{total}{ranks}; checkpoint: {folder}"
        return RunStopped(message, str(folder), step, announce=self.info.is_main)

    def already_done(self, state: TrainerState | None, steps: int) -> bool:
        """Whether the checkpoint resumed from is this run's end for ``steps`` (then there is
        nothing to train: the caller writes the final model if missing, see :meth:`finish`).

        A longer ``steps`` (``--resume``) continues from the end state; the same ``steps``
        is done, as is a run its caller ended early (``ended`` in the state: SFT's
        ``on_step``); a checkpoint past ``steps`` is refused, since the final model would
        not be the one ``steps`` asks for.
        """
        if state is None:
            return False
        step, ended = state["step"], int(state["extra"].get("ended", 0))
        if step > steps:
            raise ConfigError(
                f"steps={steps}: the run in {self.out} has already trained {step} steps; "
                f"give steps={step} or more with --resume, or a new output_dir"
            )
        if step < steps and ended < steps:
            return False
        if self.info.is_main:
            self.reporter.line(
                f"already done: step {step}/{steps} in {self.out}; "
                "a larger steps= with --resume trains on"
            )
        return True

    def end(
        self, step: int, steps: int, saved: bool, parts: Checkpointed, extra: dict[str, object]
    ) -> None:
        """Save the run's end state (unless ``step`` was just saved as it is), so that a
        rerun says it is done and ``--resume`` with a larger ``steps`` continues."""
        if not self.save_end:
            return
        if not saved or step < steps:  # a run ended early records the steps it ended under
            self.save(step, parts, {**extra, "ended": steps})

    def finish(
        self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, *, keep_existing: bool = False
    ) -> Path:
        """Write the final model (full weights, gathered from FSDP shards) to OUTPUT_DIR/final.

        Written to a temporary folder and renamed, so ``final`` is whole or absent;
        ``keep_existing``: a ``final`` already there is kept (a finished run rerun). A run
        started with ``save_end=False`` writes none and returns its folder.
        """
        self.metrics.close()
        if not self.save_end:  # the run measured its steps: it keeps no model
            self.close()
            return self.out
        final = self.out / "final"
        if keep_existing and (final / "config.json").is_file():
            self.close()
            return final
        tmp = self.out / ".tmp-final"
        try:
            if self.info.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            save_model(model, tokenizer, tmp, self.info)
            if self.info.is_main:
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
        except SAVE_ERRORS as exc:
            cause = os_error_of(exc, tmp)
            if cause is None:  # a bug, not the disk: keep its traceback
                raise
            if self.info.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointSaveError(
                f"could not write the final model to {final}: {save_failure_reason(cause)}; "
                "the run's end checkpoint is kept and the same command writes it once the disk "
                "has room"
            ) from exc
        self.close()
        return final

    def close(self) -> None:
        """Leave the process group (all ranks together); a no-op in one process."""
        if self.info.enabled:
            cleanup()


@dataclass(frozen=True)
class Checkpointed:
    """What a checkpoint holds of a run besides its step and data position."""

    model: nn.Module
    tokenizer: PreTrainedTokenizerBase
    optimizer: Optimizer
    scheduler: LRScheduler


TRACES = "traces"
"""The run folder's subfolder of the harness episodes' traces, ``step-NNNNNN/`` per step
(``logging.harness_traces``)."""

TRAINING_FILES = ("metrics.jsonl", "trajectories.jsonl", TRACES, "checkpoints", "final")
"""What a training run writes in its folder; once one is non-empty, the folder holds a run."""

TRAINING_SAFE = ("steps", "epochs", "logging.", "checkpoint.every_steps", "checkpoint.keep")
"""Settings ``--resume`` may change: the length of the run, its logging and checkpoint cadence."""

LOGS = ("metrics.jsonl", "trajectories.jsonl")
"""The logs a run appends to once per step (cut back to the checkpoint on resume)."""


def training_identity(cfg: RecipeConfig, resolved: dict[str, YAMLValue]) -> RunIdentity:
    """The run ``cfg`` describes: its command, and every setting but the folder itself
    (``resolved``: ``cfg`` as plain data, :func:`spreadrl.config.section_dict`'s, made once
    by the caller)."""
    settings = flatten(resolved)
    settings.pop("output_dir", None)  # a run folder may be moved and still resume
    return RunIdentity(
        command=cfg.command,
        settings=settings,
        files=TRAINING_FILES,
        safe=TRAINING_SAFE,
        summary=cfg.summary(),
    )


def claim_training_folder(
    cfg: RecipeConfig,
    resolved: dict[str, YAMLValue],
    *,
    resume_changes: bool = False,
    write: bool = True,
) -> Claim:
    """Claim ``cfg.output_dir`` for this run (see :func:`spreadrl.run_folder.claim_run_folder`);
    ``resolved``: ``cfg`` as plain data (:func:`spreadrl.config.section_dict`)."""
    identity = training_identity(cfg, resolved)
    return claim_run_folder(
        Path(cfg.output_dir),
        identity,
        resume_changes=resume_changes,
        elsewhere="output_dir=NEW_FOLDER",
        write=write,
    )


def cut_back_logs(out: Path, step: int) -> int:
    """Drop the rows of the run's logs after ``step``, and the step folders of its traces
    after it (0: a run with no checkpoint starts over); return how many went."""
    dropped = sum(cut_back_jsonl(out / name, step) for name in LOGS)
    return dropped + cut_back_step_folders(out / TRACES, step)


def cut_back_step_folders(folder: Path, step: int) -> int:
    """Remove the ``step-NNNNNN`` folders in ``folder`` after ``step``; return how many.

    A resumed run writes every step after its checkpoint again; what the interrupted
    run wrote of those steps is not the resumed run's (other weights sampled it)."""
    if not folder.is_dir():
        return 0
    removed = 0
    for path in folder.glob("step-*"):
        number = path.name.removeprefix("step-")
        if path.is_dir() and number.isdigit() and int(number) > step:
            shutil.rmtree(path)
            removed += 1
    return removed

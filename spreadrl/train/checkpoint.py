"""Checkpoints that resume exactly: weights, optimizer, scheduler, RNG, data position.

Layout of ``DIR/step-000012/``: the model in Hugging Face format (or the LoRA
adapter, for peft models) plus its tokenizer, the optimizer state as a
``torch.distributed.checkpoint`` folder (``optim/``, sharded per rank under
FSDP, so a run can resume on a different number of GPUs), per-rank RNG
states, and ``trainer_state.pt`` with the step, scheduler and data position.
``DIR/latest`` names the newest complete checkpoint; it is written last, so a
crash mid-save never points at a half-written folder. Under torchrun all
ranks must see the same filesystem.

A save is atomic against being killed at any point (a second Ctrl-C is
ignored while stopping, but SIGKILL is not): everything goes to
``DIR/.tmp-step-NNNNNN`` first, which is renamed to ``step-NNNNNN`` only when
every rank has written its part, then ``latest`` is replaced (write + rename).
A kill before the rename leaves the previous checkpoint as ``latest`` and a
stale temporary folder, removed by the next save.

What a rename cannot promise, a check at resume does. Every file of a checkpoint is
flushed to disk (fsync) before the rename, and ``manifest.json``, written last, lists
each file and its size. A folder that a lost node or a full disk left cut short (a
file missing, shorter, or a ``trainer_state.pt`` that does not load) is skipped with
one line naming it and what is wrong, and the previous complete checkpoint is used;
when checkpoint folders exist but none is complete, resume refuses with one line
rather than start the run over (the check, :mod:`spreadrl.models.checkpoint_files`,
is the one ``spreadrl merge`` applies too). A save that fails (ENOSPC, a read-only disk) removes
its temporary folder and raises :class:`CheckpointSaveError`: the previous checkpoint
stays untouched, and the same command resumes from it once the disk has room.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors import SafetensorError
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from transformers import PreTrainedTokenizerBase

from spreadrl.errors import SpreadrlError
from spreadrl.models.checkpoint_files import MANIFEST, STATE_FILE, CheckpointError, os_error_in
from spreadrl.models.checkpoint_files import checkpoint_problem as checkpoint_problem
from spreadrl.models.checkpoint_files import find_resume_point as find_resume_point
from spreadrl.run_folder import full_disk
from spreadrl.train.distributed import DistInfo

log = logging.getLogger(__name__)


class CheckpointSaveError(SpreadrlError):
    """A checkpoint could not be written (disk full, read-only): the previous one is kept."""


class TrainerState(TypedDict):
    """``trainer_state.pt``: the step, the scheduler's state, the recipe's data position."""

    step: int
    scheduler: dict[str, Any] | None  # torch's own state dict
    extra: dict[str, Any]  # the recipe's sampler / order state, as it saved it


def rng_state() -> dict[str, Any]:
    """Python's, numpy's, torch's (and CUDA's) RNG states, to resume a run exactly."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _barrier(info: DistInfo | None) -> None:
    if info is not None and info.enabled:
        dist.barrier()


def save_model(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase | None,
    folder: Path,
    info: DistInfo | None = None,
) -> Path:
    """A plain Hugging Face folder of the model's full weights (gathered from FSDP shards)."""
    if info is not None and info.enabled:
        full = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        if info.is_main:
            model.save_pretrained(folder, state_dict=full)
    else:
        model.save_pretrained(folder)
    if tokenizer is not None and (info is None or info.is_main):
        tokenizer.save_pretrained(folder)
    _barrier(info)
    return folder


def save_checkpoint(
    root: Path,
    step: int,
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase | None,
    optimizer: Optimizer | None,
    scheduler: LRScheduler | None,
    extra: dict[str, object] | None = None,
    keep: int = 2,
    info: DistInfo | None = None,
) -> Path:
    """Write ``root/step-NNNNNN`` and point ``root/latest`` at it; keep the newest ``keep``."""
    main = info is None or info.is_main
    folder = checkpoint_folder(root, step)
    tmp = root / f".tmp-{folder.name}"
    try:
        _write_checkpoint(tmp, step, model, tokenizer, optimizer, scheduler, extra, info)
        if main:
            _put_in_place(root, tmp, folder, keep)
    except SAVE_ERRORS as exc:
        cause = os_error_of(exc, tmp)
        if cause is None:  # a bug, not the disk: keep its traceback
            raise
        if main:
            shutil.rmtree(tmp, ignore_errors=True)  # frees what the failed save took
        raise CheckpointSaveError(_save_failed(root, folder, cause)) from exc
    _barrier(info)
    return folder


def _write_checkpoint(
    tmp: Path,
    step: int,
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase | None,
    optimizer: Optimizer | None,
    scheduler: LRScheduler | None,
    extra: dict[str, object] | None,
    info: DistInfo | None,
) -> None:
    """Every rank's part of the checkpoint into ``tmp``; the main rank writes the state,
    flushes every file to disk and writes the manifest last."""
    main = info is None or info.is_main
    rank = info.rank if info is not None else 0
    if main:
        for stale in tmp.parent.glob(".tmp-step-*"):  # left by a save that was killed
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier(info)
    save_model(model, tokenizer, tmp, info)
    if optimizer is not None:
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save(
            {"optim": get_optimizer_state_dict(model, optimizer)}, checkpoint_id=str(tmp / "optim")
        )
    torch.save(rng_state(), tmp / f"rng-{rank}.pt")
    if main:
        torch.save(
            {
                "step": step,
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "extra": extra or {},
            },
            tmp / STATE_FILE,
        )
    _barrier(info)
    if main:
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in tmp.rglob("*") if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
        _sync_tree(tmp)


def _put_in_place(root: Path, tmp: Path, folder: Path, keep: int) -> None:
    """Rename the finished ``tmp`` to ``folder``, point ``latest`` at it, prune to ``keep``."""
    if folder.exists():  # the same step saved again (a kill between the renames:
        old = root / f".old-{folder.name}"  # see latest_checkpoint)
        shutil.rmtree(old, ignore_errors=True)
        folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(folder)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(folder.name)
    latest_tmp.replace(root / "latest")
    _fsync(root)
    if keep > 0:
        steps = sorted(p for p in root.glob("step-*") if p.is_dir())
        for gone in steps[:-keep]:
            shutil.rmtree(gone, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder`` to disk: the rename that follows must
    not publish a checkpoint whose bytes are still only in the page cache."""
    for path in sorted(folder.rglob("*"), reverse=True):
        _fsync(path)
    _fsync(folder)


SAVE_ERRORS = (OSError, CheckpointException, SafetensorError, RuntimeError)
"""What a save raises when the disk fails it (and, but for OSError, when a bug does)."""

NEARLY_FULL_BYTES = 64 * 2**20
"""Free space under which a failed save is taken for a full disk: torch.save's zip writer
reports a short write as ``RuntimeError: [enforce fail at inline_container.cc] ...
unexpected pos 704 vs 598``, naming no OSError (measured on a full tmpfs, torch 2.13)."""


def os_error_of(exc: BaseException, folder: Path | None = None) -> OSError | None:
    """The OSError behind a failed save, or None for a bug (whose traceback is kept).

    ``exc`` itself; the OSError a torch.distributed.checkpoint failure wraps (it reports
    each rank's exception); the one a safetensors error names ("I/O error: No space left
    on device (os error 28)": the weights' writer, under ``save_pretrained``); else, when
    ``folder``'s disk is nearly full, ENOSPC (torch.save's writer names none)."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, SafetensorError):
        found = os_error_in(exc)
        if found is not None:
            return found
    if isinstance(exc, CheckpointException):
        for failure, _trace in exc.failures.values():
            if isinstance(failure, OSError | SafetensorError):
                return os_error_of(failure, folder)
    if folder is not None and _nearly_full(folder):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def _nearly_full(folder: Path) -> bool:
    """Whether the disk ``folder`` is on (or would be on) has almost no space left."""
    where = next((p for p in (folder, *folder.parents) if p.exists()), Path("/"))
    try:
        return shutil.disk_usage(where).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def save_failure_reason(exc: OSError) -> str:
    """Why a save failed, for its one line: "no space left on device", else the OS's words."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    return exc.strerror or str(exc)


def _save_failed(root: Path, folder: Path, exc: OSError) -> str:
    """The one line a failed save raises: what failed, and what a rerun resumes from."""
    why, after = save_failure_reason(exc), _rerun(root, "previous")
    return f"could not save checkpoint {folder}: {why}; {after} once the disk has room"


def _rerun(root: Path, which: str) -> str:
    """What the same command does after a failed write: resume from the newest complete
    checkpoint in ``root``, or start over."""
    try:
        kept, _ = find_resume_point(root)
    except CheckpointError:  # step folders, none complete: the rerun refuses to start over
        return f"no complete checkpoint is in {root}: move it away and the same command starts over"
    if kept is None:
        none = "no earlier checkpoint" if which == "previous" else "no checkpoint was saved"
        return f"{none}; the same command starts the run over"
    return f"the {which} checkpoint {kept} is kept; the same command resumes from it"


class DiskFullError(SpreadrlError):
    """The disk filled up while a run wrote its logs (metrics, trajectories, a tracker's
    files) between checkpoints: the run stops, and its last checkpoint is what a rerun
    resumes from."""


def disk_full_error(exc: OSError, root: Path) -> DiskFullError | None:
    """The one line for a run whose write found the disk full or over quota, naming what a
    rerun resumes from (``root``: the run's checkpoints); None for any other ``OSError``,
    which is a bug to report with its traceback."""
    why = full_disk(exc)
    if why is None:
        return None
    return DiskFullError(f"the run stopped: {why}; {_rerun(root, 'last')} once the disk has room")


def checkpoint_folder(root: Path, step: int) -> Path:
    """Where ``save_checkpoint`` puts ``step``."""
    return root / f"step-{step:06d}"


def checkpoint_step(folder: Path) -> int:
    """The step a checkpoint folder holds (the inverse of :func:`checkpoint_folder`)."""
    return int(folder.name.removeprefix("step-"))


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under ``root``, or None (see :func:`find_resume_point`)."""
    return find_resume_point(root)[0]


def load_trainer_state(
    folder: Path,
    model: nn.Module,
    optimizer: Optimizer | None,
    scheduler: LRScheduler | None,
    info: DistInfo | None = None,
) -> TrainerState:
    """Restore optimizer, scheduler and RNG from ``folder``; return the saved state dict.

    The optimizer state is resharded to the current world size by
    torch.distributed.checkpoint; a rank with no saved RNG (a larger world than
    the one that saved) keeps its seeded RNG.
    """
    path = folder / STATE_FILE
    if not path.exists():
        raise SpreadrlError(f"{folder}: not a spreadrl checkpoint (no {STATE_FILE})")
    try:
        state: TrainerState = torch.load(path, weights_only=False)
        if optimizer is not None and (folder / "optim").exists():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            osd = get_optimizer_state_dict(model, optimizer)
            dcp.load({"optim": osd}, checkpoint_id=str(folder / "optim"))
            set_optimizer_state_dict(model, optimizer, osd)
        if scheduler is not None and state.get("scheduler") is not None:
            scheduler.load_state_dict(state["scheduler"])
        rng_file = folder / f"rng-{info.rank if info is not None else 0}.pt"
        if rng_file.exists():
            set_rng_state(torch.load(rng_file, weights_only=False))
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, CheckpointException) as exc:
        log.debug("checkpoint %s does not load", folder, exc_info=True)
        raise CheckpointError(
            f"checkpoint {folder} does not load ({type(exc).__name__}: {_one_line(exc)}); "
            "move it away to resume from the one before"
        ) from exc
    return state


def resume_trainer_state(
    folder: Path | None,
    model: nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    info: DistInfo,
) -> TrainerState | None:
    """:func:`load_trainer_state` from a run's resume point; None for a new run (``folder``
    None: no checkpoint to resume)."""
    if folder is None:
        return None
    return load_trainer_state(folder, model, optimizer, scheduler, info)

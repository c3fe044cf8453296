"""Whether a training checkpoint folder is complete: one rule for resume and for export.

A checkpoint (``DIR/step-NNNNNN/``, written by :mod:`spreadrl.train.checkpoint`)
holds ``trainer_state.pt`` and, written last, ``manifest.json``: every other file's
relative path and size. A folder that a lost node or a full disk left cut short (a
file missing or shorter, a ``trainer_state.pt`` that does not load) is incomplete.
Resuming a run (:mod:`spreadrl.train.setup`) and ``spreadrl merge``
(:mod:`spreadrl.models.export`) both skip such a folder with one line naming it and
take the previous complete one, or refuse with one line when none is complete. The
rule sits here, beside export and below train, so both read the same one.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import SafetensorError

from spreadrl.errors import SpreadrlError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

STATE_FILE = "trainer_state.pt"
MANIFEST = "manifest.json"
"""Written last into a checkpoint: every other file's relative path and size in bytes."""


class CheckpointError(SpreadrlError):
    """No checkpoint to resume from is complete, or one could not be read."""


def find_resume_point(root: Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint under ``root`` (or None), and one line per newer
    folder skipped because it is incomplete (see :func:`checkpoint_problem`).

    Raises CheckpointError when ``step-*`` folders exist but none is complete: a run
    that started over would cut its logs back to nothing.

    ``latest`` names the newest checkpoint for a reader; the folders themselves decide,
    so a kill between the two renames of a re-saved step (``latest`` naming a folder
    that is gone) or between the rename and ``latest``'s update loses nothing.
    """
    if not root.is_dir():
        return None, []
    skipped: list[str] = []
    for folder in sorted((p for p in root.glob("step-*") if p.is_dir()), reverse=True):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, skipped
        skipped.append(f"checkpoint {folder} is incomplete ({problem}): skipped")
    if skipped:
        raise CheckpointError(
            f"no complete checkpoint in {root}: "
            + "; ".join(s.removeprefix("checkpoint ") for s in skipped)
            + "; move the folder away to start the run over"
        )
    return None, []


def checkpoint_problem(folder: Path) -> str | None:
    """What makes ``folder`` unusable as a checkpoint (one phrase), or None when complete.

    Checked: ``trainer_state.pt`` loads, and every file ``manifest.json`` lists is there
    with its size. A folder written before the manifest existed is judged by its state
    file alone.
    """
    state = folder / STATE_FILE
    if not state.is_file():
        return f"no {STATE_FILE}"
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text())["files"]
        except (ValueError, KeyError, TypeError):
            return f"{MANIFEST} does not parse"
        for name, size in sorted(files.items()):
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != size:
                return f"{name} has {path.stat().st_size} of its {size} bytes"
    try:
        torch.load(state, weights_only=False)
    except Exception as exc:  # a truncated pickle raises one of several types
        return f"{STATE_FILE} does not load ({type(exc).__name__})"
    return None


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def os_error_in(exc: SafetensorError) -> OSError | None:
    """The OSError that safetensors' Rust writer reports only as text ("Error while
    serializing: I/O error: No space left on device (os error 28)", under
    ``save_pretrained``), so a full disk reads as one, not as a bug; None if it names none."""
    code = _RUST_OS_ERROR.search(str(exc))
    return OSError(int(code[1]), os.strerror(int(code[1]))) if code else None


def save_weights(model: PreTrainedModel, folder: Path) -> None:
    """``model.save_pretrained(folder)`` in safetensors; a full disk raises the OSError that
    safetensors reports only as text (:func:`os_error_in`), naming ``folder``, so the
    command line gives its one line instead of a traceback."""
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except SafetensorError as exc:
        cause = os_error_in(exc)
        if cause is None:
            raise
        cause.filename = str(folder)
        raise cause from exc

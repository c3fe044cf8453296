"""A command that fails before it produced anything leaves no output folder behind.

``spreadrl grpo`` with a bad model path used to leave ``output_dir/config.yaml``:
a folder that looks like a run and holds none. The recipes create their folder
first (the config is saved beside the outputs), so the commands clean up after
a failed start instead: the folder goes only if this command created it and no
result landed in it. A folder that existed before (a resumed run, a user's
folder) is never touched, nor is one holding a result, whatever failed later.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from spreadrl.run_folder import has_results

TRAINING_RESULTS = ("metrics.jsonl", "checkpoints")
"""What a training run has written once it ran a step (a metrics line, a checkpoint)."""
EVAL_RESULTS = ("trajectories.jsonl",)
"""What an eval has written once an episode finished."""

__all__ = ["EVAL_RESULTS", "TRAINING_RESULTS", "has_results", "removed_if_failed_start"]


@contextmanager
def removed_if_failed_start(folder: Path, results: Sequence[str]) -> Iterator[None]:
    """Run the body; if it raises and ``folder`` is new and holds none of ``results``, delete it."""
    existed = folder.exists()
    try:
        yield
    except BaseException:
        if not existed and folder.is_dir() and not has_results(folder, results):
            shutil.rmtree(folder, ignore_errors=True)  # other ranks may be removing it too
        raise

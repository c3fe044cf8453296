"""``python -m tests.train.killed_spreadrl ARGS``: ``python -m spreadrl ARGS`` that can be
SIGKILLed at a known point, and whose GRPO can run on a fake gym.

With ``SPREADRL_TEST_KILL=STEP`` set, the process kills itself (SIGKILL: no handler, no
cleanup, as a lost node or the OOM killer) in the middle of saving checkpoint ``STEP``:
after the model's weights are in the checkpoint's temporary folder, before its
optimizer state, RNG states, trainer state and manifest. A test chooses the point, so
the kill lands there on any machine however fast its steps are.

With ``SPREADRL_TEST_FAKE_GYM=1``, ``spreadrl grpo`` trains on one in-code task
against :class:`tests.rollout.fakes.FakePool` (no workbook, no LibreOffice): the
tiny model's GRPO in a second. :func:`use_fake_gym` does the same in the test's own
process, for the rerun. Everything else is the real command line.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import spreadrl.train.checkpoint as checkpoint
import spreadrl.train.episodes as episodes
from spreadrl.cli.main import main
from spreadrl.data.task import TaskSet
from tests.rollout.fakes import FakePool, make_task


def _killed_in_save(save_model: Callable[..., Path], step: int) -> Callable[..., Path]:
    def save(model: Any, tokenizer: Any, folder: Path, info: Any = None) -> Path:
        done = save_model(model, tokenizer, folder, info)
        if folder.name == f".tmp-{checkpoint.checkpoint_folder(folder, step).name}":
            os.kill(os.getpid(), signal.SIGKILL)
        return done

    return save


def use_fake_gym(setattr_: Callable[[Any, str, Any], None] = setattr) -> None:
    """Make ``spreadrl grpo`` train on one in-code task against a FakePool
    (``setattr_``: a test's ``monkeypatch.setattr``, so the change is undone)."""
    setattr_(episodes, "make_env_pool", lambda env, workers: contextlib.nullcontext(FakePool()))
    setattr_(episodes, "resolve_tasks", lambda source: TaskSet(Path("."), [make_task()]))


if kill := os.environ.get("SPREADRL_TEST_KILL"):
    checkpoint.save_model = _killed_in_save(checkpoint.save_model, int(kill))
if os.environ.get("SPREADRL_TEST_FAKE_GYM"):
    use_fake_gym()

if __name__ == "__main__":
    main()

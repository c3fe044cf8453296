"""Stopping a run on SIGINT / SIGTERM after a whole step, on every rank alike."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

from spreadrl.train.distributed import DistInfo, all_reduce


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM (a scheduler's preemption) stop a run after a whole step.

    A signal only sets a flag. At each step boundary every rank calls
    :meth:`requested`, which under torchrun is one ``all_reduce`` (max) of the
    signal number, so all ranks learn together that some rank was signalled and
    stop after the same step; they then save the same checkpoint together
    (:func:`spreadrl.train.checkpoint.save_checkpoint` is collective under FSDP2:
    the full model state dict is gathered to rank 0, the optimizer state is
    saved sharded by every rank with ``torch.distributed.checkpoint``, and each
    rank writes its RNG state). Ranks that reacted on their own, at different
    points, would deadlock in a collective or write a torn checkpoint. A signal
    never interrupts a step: rollouts, update, metrics and checkpoint of the
    step under way finish, so the checkpoint is always a whole step.

    What torchrun does (read in torch 2.13's ``torch.distributed.elastic`` and
    ``torch.distributed.run``): the launcher handles SIGTERM, SIGINT, SIGHUP and
    SIGQUIT (``--signals-to-handle``). On one it sends that same signal to each
    local worker's process group (``os.killpg``; workers start in a session of
    their own, so a terminal's Ctrl-C reaches only torchrun, which forwards it as
    SIGINT), waits ``--shutdown-timeout`` seconds (default 30, or
    ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``), SIGKILLs the workers still alive, and
    then exits non-zero itself (it re-raises the signal as ``SignalException``).
    The step under way and the save must fit in that grace period. If the
    SIGKILL comes first, nothing is torn: a checkpoint is written to a
    temporary folder, renamed when complete, and ``latest`` is switched last, so
    the previous checkpoint stays the one a rerun resumes from.

    Further signals while stopping (Slurm signals every process of the job and
    torchrun forwards its own copy, so a rank often gets two) are reported and
    ignored: they never cut the save short. Only SIGKILL stops at once. Outside
    the main thread, where Python cannot handle signals, this does nothing.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, rank: int | None = None) -> None:
        self.label = f"[rank {rank}] " if rank is not None else ""  # under torchrun
        self.received = 0  # the first signal's number; 0 for none
        self._previous: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def install(self) -> None:
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._catch)

    def restore(self) -> None:
        """Give the signals back to the handlers they had before :meth:`install`."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _catch(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.received:
            self.received = signum
            text = f"{name}: stopping after the step under way, then saving a checkpoint"
        else:
            text = (
                f"{name} again: already stopping; a checkpoint is renamed into place only "
                "once complete, so kill -9 now keeps the previous one"
            )
        # os.write, not print or logging: a handler may run in the middle of a write to
        # the same stream, where a buffered writer raises "reentrant call"; and a closed
        # stderr must not turn the notice into an exception raised inside the step
        with contextlib.suppress(OSError):
            os.write(2, f"{self.label}{text}\n".encode())

    def requested(self, info: DistInfo) -> str | None:
        """At a step boundary, on every rank alike: the signal's name if any rank got one.

        Under torchrun this is a collective (one ``all_reduce``), so every rank
        must call it at the same point of every step.
        """
        received = self.received
        if info.enabled:
            received = int(all_reduce(float(received), op="max"))
        return signal.Signals(received).name if received else None

"""Memory and CPU-time limits of the environment workers: for what the archive gate cannot see.

The gate (:mod:`spreadrl.archive_gate`) refuses archives that lie or inflate
beyond their limits, but an honest archive can still hold a 100 MB sheet of
distinct cells, or formulas that take minutes to compute, and both are read
outside the code interpreter's sandbox (the grading, recalculate_and_read).
So each worker of an :class:`~spreadrl.env.pool.EnvPool` runs under:

- ``RLIMIT_AS`` (``env.worker_memory_mb``), set once when the worker starts:
  a Python allocation over it raises ``MemoryError``; a C extension that
  cannot allocate (IronCalc aborts) takes the worker down, and the pool
  restarts it;
- a CPU-time budget per request (``env.worker_cpu_s``): the soft
  ``RLIMIT_CPU`` is moved to the CPU already used plus the budget before each
  request, so the kernel's ``SIGXCPU`` arrives when one request overspends; the
  handler raises :class:`EnvLimitExceeded` at the next Python instruction;
- a wall-clock watchdog per request (``faulthandler``'s own thread, which needs
  no interpreter lock): a request stuck inside C code long after its budget
  ends the worker (exit status 1, its stack written to stderr), which the pool
  restarts.

:class:`~spreadrl.env.spreadsheet.episode.SpreadsheetEnv` turns ``MemoryError`` and
:class:`EnvLimitExceeded` into the end reason ``env_limit``: the episode is
scored 0 and the worker goes on with its next request. The inline pool
(``workers: 0``) runs in the caller's process and sets no limits.
"""

from __future__ import annotations

import faulthandler
import resource
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from spreadrl.errors import SpreadrlError

WATCHDOG_GRACE_S = 300.0  # past the budget and the code interpreter's wall time


class EnvLimitExceeded(SpreadrlError):
    """A tool call or grading ran over its worker's CPU-time budget."""

    end_reason = "env_limit"


@dataclass(frozen=True)
class WorkerLimits:
    """One worker's limits; 0 turns a limit off."""

    memory_mb: int = 4096
    cpu_s: int = 300
    wall_s: float = 0.0  # the watchdog; 0: cpu_s plus WATCHDOG_GRACE_S

    def apply_memory(self) -> None:
        """Cap this process's address space (once, at the worker's start)."""
        if self.memory_mb > 0:
            cap = self.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    @contextmanager
    def request(self) -> Iterator[None]:
        """Run one request under the CPU budget and the watchdog."""
        if self.cpu_s <= 0:
            yield
            return
        _arm(self.cpu_s)
        wall = self.wall_s or self.cpu_s + WATCHDOG_GRACE_S
        faulthandler.dump_traceback_later(wall, exit=True, file=sys.stderr)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
            _disarm()


_budget_s = 0


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _arm(cpu_s: int) -> None:
    global _budget_s
    if signal.getsignal(signal.SIGXCPU) is not _on_sigxcpu:
        signal.signal(signal.SIGXCPU, _on_sigxcpu)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(_cpu_used()) + cpu_s + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    _budget_s = cpu_s
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _disarm() -> None:
    global _budget_s
    _budget_s = 0
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


def _on_sigxcpu(signum: int, frame: FrameType | None) -> None:
    """Raise in the request that overspent (once: the limit is lifted while it unwinds)."""
    if not _budget_s:
        return  # a late signal after the request ended
    budget = _budget_s
    _disarm()
    raise EnvLimitExceeded(f"the call used more than its {budget} s of CPU time (env.worker_cpu_s)")

"""Peak memory of one phase of a run (rollout, log-prob passes, update), on GPU or CPU.

On CUDA it is the allocator's peak (``torch.cuda.max_memory_allocated``); on
CPU it is the process's peak resident set (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``), so it counts everything the process touched,
Python and libraries included. Elsewhere (no /proc) the figures are None.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class PeakMemory:
    """Measure a phase: ``reset()`` at its start, ``peak_gb()`` / ``added_gb()`` at its end."""

    def __init__(self, device: str = "cpu") -> None:
        self.cuda = str(device).startswith("cuda")
        self.start = 0

    def _current(self) -> int | None:
        if self.cuda:
            return torch.cuda.memory_allocated()
        return _status_bytes("VmRSS")

    def reset(self) -> None:
        """Start a phase: forget earlier peaks."""
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            with contextlib.suppress(OSError):
                _CLEAR_REFS.write_text("5")  # resets VmHWM to the current RSS
        self.start = self._current() or 0

    def peak_bytes(self) -> int | None:
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated()
        return _status_bytes("VmHWM")

    def peak_gb(self) -> float | None:
        """Peak since ``reset()`` in GiB (None where it cannot be read)."""
        peak = self.peak_bytes()
        return None if peak is None else peak / 2**30

    def added_gb(self) -> float | None:
        """Peak since ``reset()`` minus the memory in use at ``reset()``, in GiB."""
        peak = self.peak_bytes()
        return None if peak is None else max(0, peak - self.start) / 2**30

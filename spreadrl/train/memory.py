"""Peak memory of one phase of a run (rollout, log-prob passes, update), on GPU or CPU.

On CUDA a phase records three peaks, because they differ by gigabytes
(docs/benchmarks.md, 2026-11-26: 75.4 GiB allocated, 80.0 GiB on the device):

- ``*_peak_gb``: the allocator's peak, ``torch.cuda.max_memory_allocated``;
- ``*_reserved_gb``: what the caching allocator held, ``max_memory_reserved``
  (allocated plus cached blocks and fragmentation);
- ``*_device_gb``: the device's memory in use as NVML reports it (what
  nvidia-smi shows: the CUDA context, NCCL's buffers and every process on the
  device, a vLLM engine included), the most of the samples taken at the phase's
  boundaries and by a sampler thread during it; with it ``*_gpu_util``, the
  mean GPU utilisation (percent) over the phase. These need ``nvidia-ml-py``
  (the ``gpu`` extra); without it they are left out, with one log line.

On CPU the peak is the process's peak resident set (Linux ``VmHWM``, reset
through ``/proc/self/clear_refs``), so it counts everything the process
touched, Python and libraries included; elsewhere (no /proc) it is None.

The trainer's process runs the caching allocator with expandable segments
(:func:`spreadrl.rollout.allocator.use_expandable_segments`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Protocol

import torch

log = logging.getLogger(__name__)

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
GIB = 2**30
SAMPLE_INTERVAL_S = 0.25
# the per-phase keys a run's metrics carry (the most of any rank under torchrun)
PHASES = ("rollout", "train")
SUFFIXES = ("peak_gb", "reserved_gb", "device_gb")
MEMORY_KEYS = tuple(f"{p}_{s}" for p in PHASES for s in SUFFIXES)


class DeviceReader(Protocol):
    """The device-level figures NVML gives (fakes stand in for it in the tests)."""

    def used_bytes(self) -> int: ...

    def utilization(self) -> int: ...


class NvmlReader:
    """NVML through torch's helpers, which map ``CUDA_VISIBLE_DEVICES`` to NVML's index."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)

    def used_bytes(self) -> int:
        return int(torch.cuda.device_memory_used(self.device))

    def utilization(self) -> int:
        return int(torch.cuda.utilization(self.device))


def nvml_reader(device: str) -> DeviceReader | None:
    """An NVML reader for a CUDA ``device``, or None (CPU, no driver, no nvidia-ml-py)."""
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return None
    reader = NvmlReader(device)
    try:
        reader.used_bytes()
        reader.utilization()
    except Exception as exc:  # ModuleNotFoundError, or any pynvml NVMLError
        log.info("no device-level memory or utilisation (NVML: %s): pip install nvidia-ml-py", exc)
        return None
    return reader


class DeviceSampler:
    """The most memory in use and the mean utilisation a reader saw since ``reset()``.

    ``start()`` samples every ``interval`` seconds on a daemon thread; ``sample()``
    takes one at once (the phase boundaries, and the tests)."""

    def __init__(self, reader: DeviceReader, interval: float = SAMPLE_INTERVAL_S) -> None:
        self.reader = reader
        self.interval = interval
        self._lock = threading.Lock()
        self._most = 0
        self._util: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        used, util = self.reader.used_bytes(), self.reader.utilization()
        with self._lock:
            self._most = max(self._most, used)
            self._util.append(util)

    def reset(self) -> None:
        with self._lock:
            self._most, self._util = 0, []
        self.sample()

    def most_bytes(self) -> int:
        self.sample()
        with self._lock:
            return self._most

    def mean_utilization(self) -> float:
        with self._lock:
            return sum(self._util) / len(self._util) if self._util else 0.0

    def start(self) -> DeviceSampler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.interval + 1)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):  # a driver hiccup costs a sample, not the run
                self.sample()


def _status_bytes(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class PeakMemory:
    """Measure a phase: ``reset()`` at its start, ``figures(phase)`` at its end.

    ``device``: the run's device; ``sampler``: the device-level sampler (default:
    NVML's on CUDA, started on a daemon thread; None elsewhere)."""

    def __init__(self, device: str = "cpu", sampler: DeviceSampler | None = None) -> None:
        self.cuda = str(device).startswith("cuda")
        self.start = 0
        if sampler is None and self.cuda:
            reader = nvml_reader(str(device))
            sampler = DeviceSampler(reader).start() if reader is not None else None
        self.sampler = sampler

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
        if self.sampler is not None:
            self.sampler.reset()
        self.start = self._current() or 0

    def peak_bytes(self) -> int | None:
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated()
        return _status_bytes("VmHWM")

    def peak_gb(self) -> float | None:
        """Peak since ``reset()`` in GiB (None where it cannot be read)."""
        peak = self.peak_bytes()
        return None if peak is None else peak / GIB

    def added_gb(self) -> float | None:
        """Peak since ``reset()`` minus the memory in use at ``reset()``, in GiB."""
        peak = self.peak_bytes()
        return None if peak is None else max(0, peak - self.start) / GIB

    def figures(self, phase: str) -> dict[str, float]:
        """The phase's metrics: ``{phase}_peak_gb`` always (0.0 where unreadable); on
        CUDA ``{phase}_reserved_gb``; with NVML ``{phase}_device_gb`` and ``{phase}_gpu_util``."""
        out = {f"{phase}_peak_gb": self.peak_gb() or 0.0}
        if self.cuda:
            out[f"{phase}_reserved_gb"] = torch.cuda.max_memory_reserved() / GIB
        if self.sampler is not None:
            out[f"{phase}_device_gb"] = self.sampler.most_bytes() / GIB
            out[f"{phase}_gpu_util"] = self.sampler.mean_utilization()
        return out

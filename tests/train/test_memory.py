"""Per-phase memory figures: allocated, reserved and device-level peaks, with fakes for CUDA and NVML."""

from __future__ import annotations

import time

import pytest
import torch

from spreadrl.rollout.allocator import (
    ALLOC_CONF,
    EXPANDABLE,
    SET_BY_SPREADRL,
    engine_allocator_env,
    use_expandable_segments,
)
from spreadrl.train.memory import MEMORY_KEYS, DeviceSampler, PeakMemory, nvml_reader

GIB = 2**30


class FakeNvml:
    """A device whose memory in use and utilisation follow a script."""

    def __init__(self, used: list[int], util: list[int]) -> None:
        self.used, self.util = list(used), list(util)

    def used_bytes(self) -> int:
        return self.used.pop(0) if len(self.used) > 1 else self.used[0]

    def utilization(self) -> int:
        return self.util.pop(0) if len(self.util) > 1 else self.util[0]


def test_the_sampler_keeps_the_most_in_use_and_the_mean_utilisation_since_reset():
    sampler = DeviceSampler(FakeNvml([9 * GIB, 3 * GIB, 7 * GIB, 5 * GIB], [90, 10, 30, 50]))
    sampler.sample()  # 9 GiB before the phase: forgotten by reset
    sampler.reset()  # 3 GiB, 10%
    sampler.sample()  # 7 GiB, 30%
    assert sampler.most_bytes() == 7 * GIB  # reads 5 GiB at the boundary too
    assert sampler.mean_utilization() == pytest.approx((10 + 30 + 50) / 3)


def test_the_sampler_thread_samples_on_its_own():
    reader = FakeNvml([1 * GIB], [40])
    calls = 0
    original = reader.used_bytes

    def counted() -> int:
        nonlocal calls
        calls += 1
        return original()

    reader.used_bytes = counted  # type: ignore[method-assign]
    sampler = DeviceSampler(reader, interval=0.01).start()
    try:
        for _ in range(500):
            if calls >= 3:
                break
            time.sleep(0.01)
    finally:
        sampler.stop()
    assert calls >= 3


def test_cpu_phases_record_the_peak_alone_and_nvml_adds_the_device_figures():
    plain = PeakMemory("cpu")
    plain.reset()
    figures = plain.figures("train")
    assert set(figures) == {"train_peak_gb"}
    sampled = PeakMemory("cpu", sampler=DeviceSampler(FakeNvml([2 * GIB, 6 * GIB], [20, 60])))
    sampled.reset()
    figures = sampled.figures("rollout")
    assert figures["rollout_device_gb"] == pytest.approx(6.0)
    assert figures["rollout_gpu_util"] == pytest.approx(40.0)


def test_cuda_phases_record_reserved_beside_allocated(monkeypatch):
    stats = {"allocated": 5 * GIB, "reserved": 8 * GIB, "resets": 0}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(
        torch.cuda, "reset_peak_memory_stats", lambda *a: stats.__setitem__("resets", 1)
    )
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: GIB)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: stats["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: stats["reserved"])
    memory = PeakMemory("cuda", sampler=DeviceSampler(FakeNvml([9 * GIB], [75])))
    memory.reset()
    assert stats["resets"] == 1
    figures = memory.figures("train")
    assert figures == {
        "train_peak_gb": 5.0,
        "train_reserved_gb": 8.0,
        "train_device_gb": 9.0,
        "train_gpu_util": 75.0,
    }
    assert {"train_peak_gb", "train_reserved_gb", "train_device_gb"} <= set(MEMORY_KEYS)


def test_no_nvml_reader_without_cuda():
    assert nvml_reader("cpu") is None
    if not torch.cuda.is_available():
        assert nvml_reader("cuda") is None


def test_expandable_segments_are_set_for_the_trainer_unless_the_user_chose():
    env: dict[str, str] = {}
    assert use_expandable_segments("hf", env)
    assert env[ALLOC_CONF] == EXPANDABLE and env[SET_BY_SPREADRL] == "1"
    user = {ALLOC_CONF: "expandable_segments:False"}
    assert not use_expandable_segments("hf", user)
    assert user == {ALLOC_CONF: "expandable_segments:False"}
    in_process = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    assert not use_expandable_segments("vllm", in_process)  # the engine's allocator is here
    assert ALLOC_CONF not in in_process
    assert use_expandable_segments("vllm", {})  # the engine is spawned apart


def test_the_engines_process_does_not_inherit_spreadrls_setting():
    env: dict[str, str] = {}
    use_expandable_segments("vllm", env)
    with engine_allocator_env(env):
        assert ALLOC_CONF not in env  # what a spawned engine would inherit
    assert env[ALLOC_CONF] == EXPANDABLE  # the trainer keeps it
    user = {ALLOC_CONF: EXPANDABLE}  # the user's own choice is theirs to keep
    with engine_allocator_env(user):
        assert user[ALLOC_CONF] == EXPANDABLE

"""The CUDA caching allocator's setting for the trainer's process, kept from vLLM's engine.

The trainer runs the allocator with expandable segments, as torchtitan's launch
script does: a freed block can be grown into in place instead of being left
stranded between others, which is most of what the allocator reserves beyond
its allocations (docs/benchmarks.md, 2026-11-26: 80.0 GiB on the device for
75.4 GiB allocated, with the default allocator). vLLM's sleep-mode allocator
(``CuMemAllocator``, vllm/device_allocator/cumem.py) refuses the setting in the
process that holds it: its constructor asserts that
``PYTORCH_CUDA_ALLOC_CONF`` has no ``expandable_segments:True`` (later versions
switch it off around their memory pool instead). So it is set here only for
the trainer, and taken out of the environment while an engine's own process is
spawned. Lives in rollout (below train) because the engine is started here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, MutableMapping

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"
SET_BY_SPREADRL = "SPREADRL_SET_ALLOC_CONF"  # children can tell spreadrl's setting from the user's


def use_expandable_segments(
    rollout_backend: str | None = None, environ: MutableMapping[str, str] | None = None
) -> bool:
    """Turn on the allocator's expandable segments for this (trainer) process.

    Left alone when the user set ``PYTORCH_CUDA_ALLOC_CONF`` (any value, also to
    turn this off), and when the rollout engine ``rollout_backend`` says no
    (:meth:`~spreadrl.rollout.engine.RolloutEngine.allows_expandable_segments`: a vLLM
    engine inside this process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, whose sleep-mode
    allocator refuses expandable segments in the process that holds it; None: no
    engine). An engine in its own process must not inherit the setting either:
    :func:`engine_allocator_env` takes it out for the spawn. Call before CUDA is
    initialised (the allocator reads it once). Returns whether it was set."""
    env = os.environ if environ is None else environ
    if ALLOC_CONF in env:
        return False
    if rollout_backend is not None:
        from spreadrl.rollout.engine import engine_class

        if not engine_class(rollout_backend).allows_expandable_segments(env):
            return False
    env[ALLOC_CONF] = EXPANDABLE
    env[SET_BY_SPREADRL] = "1"
    return True


@contextlib.contextmanager
def engine_allocator_env(environ: MutableMapping[str, str] | None = None) -> Iterator[None]:
    """``os.environ`` without spreadrl's own allocator setting, while a vLLM engine's
    process is spawned (it inherits the environment); a setting the user made stays."""
    env = os.environ if environ is None else environ
    if env.get(SET_BY_SPREADRL) != "1" or env.get(ALLOC_CONF) != EXPANDABLE:
        yield
        return
    env.pop(ALLOC_CONF)
    try:
        yield
    finally:
        env.setdefault(ALLOC_CONF, EXPANDABLE)

"""The server's LockedPolicy: one act() at a time, and otherwise the policy it wraps."""

from __future__ import annotations

import threading

from spreadrl.rollout.policy import is_streaming, is_token_level
from spreadrl.rollout.types import PolicyTurn, SamplingParams
from spreadrl.serve.limits import LockedPolicy


class Recorder:
    """A token policy that records the seeds it was given and whether the lock was held."""

    token_level = True
    streaming = False
    seeds_per_context = True
    max_context_tokens = 4096

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        self.calls: list[tuple[object, bool]] = []

    def act(self, contexts, params, *, seeds=None):
        self.calls.append((seeds, self.lock.locked()))
        return [PolicyTurn("x", [1], [-0.5]) for _ in contexts]


def test_the_locked_policy_declares_the_wrapped_ones_members_and_passes_the_seeds():
    lock = threading.Lock()
    inner = Recorder(lock)
    policy = LockedPolicy(inner, lock)
    assert is_token_level(policy) and not is_streaming(policy)
    assert policy.seeds_per_context is True and policy.max_context_tokens == 4096
    policy.act([[1], [2]], SamplingParams(1.0, 1.0, 0, max_new_tokens=4), seeds=[3, 4])
    assert inner.calls == [([3, 4], True)]

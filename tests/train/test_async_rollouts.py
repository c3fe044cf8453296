"""Asynchronous GRPO's parts: the producer's staleness bound, versions, partial rollouts,
the behaviour weights, stopping."""

from __future__ import annotations

import math
import threading

import pytest

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn, SamplingParams, Trajectory
from spreadrl.train.batching import Sample
from spreadrl.train.producer import (
    AsyncRollouts,
    ProducerStopped,
    VersionedPolicy,
    VersionedStreamingPolicy,
    _Busy,
    behaviour_weight_metrics,
    finish_versions,
    oldest_version,
    staleness,
    stamp_samples,
    versioned,
)
from tests.rollout.fakes import FakePool, make_task
from tests.rollout.test_streaming import ContextPolicy

WAIT_S = 30.0  # only a broken producer waits this long (the tests fail then)


class Counter:
    """A token policy stub: one token per context, and a record of every call."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self) -> None:
        self.calls = 0
        self.seeds: list[object] = []

    def act(self, contexts, params, *, seeds=None):
        self.calls += 1
        self.seeds.append(seeds)
        return [PolicyTurn("x", [1], [-0.5]) for _ in contexts]


def test_turns_carry_the_version_applied_before_the_call_and_only_the_newest_payload_loads():
    applied = []
    policy = VersionedPolicy(Counter(), applied.append, version=3)
    params = SamplingParams(1.0, 1.0, 0, max_new_tokens=16)
    assert [t.version for t in policy.act([[1], [2]], params)] == [3, 3]
    policy.publish(4, "w4")
    policy.publish(5, "w5")  # replaces w4 before the producer got to it
    assert [t.version for t in policy.act([[1]], params)] == [5]
    assert applied == ["w5"] and policy.syncs == 1
    assert policy.token_level is True and not policy.streaming


def test_the_wrapper_declares_what_the_wrapped_policy_does_and_passes_the_seeds():
    inner = Counter()
    inner.seeds_per_context, inner.max_context_tokens = True, 99
    policy = VersionedPolicy(inner, lambda payload: None)
    assert policy.seeds_per_context is True and policy.max_context_tokens == 99
    params = SamplingParams(1.0, 1.0, 0, max_new_tokens=16)
    policy.act([[1], [2]], params, seeds=[5, 6])
    policy.act([[1]], params)
    assert inner.seeds == [[5, 6], None]


def test_the_producer_stays_within_the_bound_and_runs_ahead_by_it():
    """k = 2: step s may start once version s - 3 is out, not before, and does start
    then: the trainer publishes version s - 1 only after it saw step s + 1 begin."""
    k, last = 2, 6
    started: dict[int, int] = {}
    begun = {s: threading.Event() for s in range(1, last + 2)}
    policy = VersionedPolicy(Counter(), lambda payload: None)
    producer: AsyncRollouts[int] = AsyncRollouts(
        lambda step: step * 10,
        lambda: {"drawn": len(started)},
        policy,
        first=1,
        last=last,
        max_staleness=k,
    )

    def produce(step: int) -> int:
        started[step] = producer.published
        begun[step].set()
        return step * 10

    producer.produce = produce
    producer.start()
    try:
        for step in range(1, last + 1):
            got = producer.take(step)
            assert (got.step, got.value) == (step, step * 10)
            assert got.sampler_state == {"drawn": step}  # read right after its own draws
            if step + k <= last:  # it ran ahead of the trainer, up to the bound
                assert begun[step + k].wait(WAIT_S), f"step {step + k} did not start early"
            producer.publish(step, f"w{step}")
    finally:
        producer.stop(timeout=WAIT_S)
    for step, version in started.items():
        assert step - 1 - k <= version <= step - 1
    assert any(step - 1 - version == k for step, version in started.items())


def test_max_staleness_zero_is_not_the_producers_job():
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        AsyncRollouts(
            lambda s: s, dict, VersionedPolicy(Counter(), print), first=1, last=2, max_staleness=0
        )


def test_a_producer_error_reaches_the_trainer():
    def fail(step: int) -> int:
        raise OSError("disk full")

    producer = AsyncRollouts(
        fail, dict, VersionedPolicy(Counter(), print), first=1, last=3, max_staleness=1
    ).start()
    with pytest.raises(RuntimeError, match="rollout producer failed: disk full"):
        producer.take(1)
    producer.stop(timeout=WAIT_S)


def test_stop_ends_the_rollouts_in_flight_and_discards_them():
    inner = Counter()
    policy = VersionedPolicy(inner, lambda payload: None)
    in_step = threading.Event()
    finished: list[int] = []

    def produce(step: int) -> int:
        policy.act([[1]], SamplingParams(1.0, 1.0, 0, max_new_tokens=16))
        in_step.set()
        while True:  # an endless rollout: only the stop ends it
            policy.act([[1]], SamplingParams(1.0, 1.0, 0, max_new_tokens=16))
            if len(finished) > 10**9:
                return step

    producer = AsyncRollouts(produce, dict, policy, first=1, last=2, max_staleness=1).start()
    assert in_step.wait(WAIT_S)
    producer.stop(timeout=WAIT_S)
    assert not producer._thread.is_alive()
    with pytest.raises(ProducerStopped):
        policy.act([[1]], SamplingParams(1.0, 1.0, 0, max_new_tokens=16))


def test_the_streaming_wrapper_applies_weights_between_engine_steps_and_aborts_on_stop(
    tiny_model,
):
    _, tok = tiny_model
    inner = ContextPolicy(tok)
    aborted: list[list[str]] = []
    inner.abort = lambda ids: aborted.append(list(ids))
    applied: list[object] = []
    policy = versioned(inner, applied.append, version=0)
    assert isinstance(policy, VersionedStreamingPolicy)
    params = SamplingParams(1.0, 1.0, 0, max_new_tokens=64)
    policy.submit("a", tok.encode("hi"), params)
    policy.publish(1, "w1")  # arrives while request "a" is running
    policy.submit("b", tok.encode("hello"), params)
    done: dict[str, PolicyTurn] = {}
    while len(done) < 2:
        done.update(policy.poll())
    # each turn is stamped with the version at its submission: the oldest that sampled it
    assert (done["a"].version, done["b"].version) == (0, 1)
    assert applied == ["w1"]
    policy.submit("c", tok.encode("hi"), params)
    policy.stop()
    with pytest.raises(ProducerStopped):
        policy.poll()
    assert aborted == [["c"]]


def test_partial_rollouts_keep_each_turns_version(tiny_model):
    """New weights published during an episode: its later turns are sampled by them, the
    turns before keep their version, tool responses carry -1."""
    _, tok = tiny_model
    inner = ContextPolicy(tok, tool_turns=2)  # three turns: two tool calls, then the answer
    policy = VersionedPolicy(inner, lambda payload: None, version=7)
    real_act = inner.act

    def act_then_sync(contexts, params, *, seeds=None):
        turns = real_act(contexts, params, seeds=seeds)
        policy.publish(policy.version + 1, None)  # a sync lands after every turn
        return turns

    inner.act = act_then_sync
    settings = RolloutConfig(scheduler="turn", max_response_tokens=400)
    jobs = [EpisodeJob(make_task(), 1, 0)]
    out = run_episodes(policy, FakePool(), jobs, settings, EpisodeChat.of(tok))
    traj = out.trajectories[0]
    finish_versions(traj)
    assert traj.turns == 3 and len(traj.response_versions) == len(traj.response_ids)
    sampled = [v for v, m in zip(traj.response_versions, traj.response_mask, strict=True) if m]
    unsampled = {
        v for v, m in zip(traj.response_versions, traj.response_mask, strict=True) if not m
    }
    assert sorted(set(sampled)) == [7, 8, 9] and sampled == sorted(sampled)
    assert unsampled == {-1}
    assert oldest_version(traj) == 7
    assert staleness(9, [traj], bound=2) == [2]
    with pytest.raises(RuntimeError, match="max_staleness is 1"):
        staleness(9, [traj], bound=1)


def test_samples_get_the_oldest_version_of_their_trajectory():
    a = Trajectory("t", 1, 0, [], prompt_ids=[1, 2], response_ids=[3, 4], response_versions=[2, 3])
    b = Trajectory("t", 1, 1, [], prompt_ids=[1, 2], response_ids=[5], response_versions=[4])
    samples = [Sample([1, 2, 5], [0, 0, 1]), Sample([1, 2, 3, 4], [0, 0, 1, 1])]
    stamp_samples(samples, [a, b])
    assert [s.version for s in samples] == [4, 2]
    assert oldest_version(Trajectory("t", 1, 2, [])) is None


def test_behaviour_weights_are_capped_importance_ratios_over_trained_tokens():
    # targets 1..3; trained: 2 and 3. weights exp(0.5) = 1.65 and exp(2) = 7.39 -> cap 2
    s = Sample([0, 1, 2, 3], [0, 0, 1, 1])
    s.old_logprobs = [0.0, -1.0, -1.0]
    s.rollout_logprobs = [0.0, -1.5, -3.0]
    got = behaviour_weight_metrics([s], cap=2.0)
    assert got["behaviour_weight_mean"] == pytest.approx((math.exp(0.5) + 2.0) / 2)
    assert got["behaviour_weight_capped"] == pytest.approx(0.5)
    assert behaviour_weight_metrics([Sample([0, 1], [0, 1])], cap=2.0) == {}


def test_overlap_counts_only_the_producers_busy_time_inside_the_window():
    busy = _Busy(closed=[(0.0, 2.0), (3.0, 4.0)], since=9.0)
    assert busy.overlap(1.0, 10.0) == pytest.approx(1.0 + 1.0 + 1.0)
    assert busy.overlap(4.5, 8.0) == 0.0

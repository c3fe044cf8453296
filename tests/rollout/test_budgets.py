"""The episode budgets, all applied by the loop: turns, tokens, the model's context, wall clock."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from spreadrl.env.types import EndReason
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from tests.rollout.fakes import FakePool, make_task


class BudgetPolicy:
    """Token-level: always calls a tool; records the budget it was asked for."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer, max_context_tokens=0):
        self.tokenizer = tokenizer
        self.asked: list[tuple[int, int]] = []  # (longest context, max_new_tokens)
        self.max_context_tokens = max_context_tokens

    def act(self, contexts, params, *, seeds=None):
        self.asked.append((max(len(c) for c in contexts), params.max_new_tokens))
        text = format_tool_call("write_range", {"range": "A1", "values": 1})
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        ids = ids[: params.max_new_tokens]
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        return [
            PolicyTurn(text, [*ids, end][: params.max_new_tokens], None, "stop") for _ in contexts
        ]


def test_no_turn_is_asked_past_the_models_context_length(tiny_model):
    _, tok = tiny_model
    probe = BudgetPolicy(tok)
    run_episodes(
        probe,
        FakePool(),
        [EpisodeJob(make_task())],
        RolloutConfig(max_turns=1),
        EpisodeChat.of(tok),
    )
    prompt = probe.asked[0][0]
    limit = prompt + 60  # room for a turn or two, not for sixteen
    policy = BudgetPolicy(tok, max_context_tokens=limit)
    settings = RolloutConfig(max_new_tokens_per_turn=1024, max_turns=16)
    out = run_episodes(policy, FakePool(), [EpisodeJob(make_task())], settings, EpisodeChat.of(tok))
    t = out.trajectories[0]
    assert all(context + budget <= limit for context, budget in policy.asked)
    assert t.turns < 16  # it ended once the context was full (the last observation may overfill it)
    assert t.stop_reason == EndReason.MAX_CONTEXT_TOKENS and t.stop_reason.truncated


def test_the_wall_clock_budget_ends_the_episode(tiny_model):
    _, tok = tiny_model
    settings = RolloutConfig(episode_wall_time_s=1e-9, max_turns=5)
    out = run_episodes(
        BudgetPolicy(tok), FakePool(), [EpisodeJob(make_task())], settings, EpisodeChat.of(tok)
    )
    t = out.trajectories[0]
    assert t.turns == 1 and t.stop_reason == EndReason.WALL_TIME
    assert not t.stop_reason.terminated and t.stop_reason.truncated


def test_answered_is_terminated_and_the_env_reward_is_kept_apart(tiny_model):
    _, tok = tiny_model

    class Answers(BudgetPolicy):
        def act(self, contexts, params, *, seeds=None):
            end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
            ids = [*self.tokenizer.encode("Done.", add_special_tokens=False), end]
            return [PolicyTurn("Done.", ids, None, "stop") for _ in contexts]

    out = run_episodes(
        Answers(tok), FakePool(), [EpisodeJob(make_task())], RolloutConfig(), EpisodeChat.of(tok)
    )
    t = out.trajectories[0]
    assert t.stop_reason == "answered" and t.stop_reason.terminated
    assert t.env_reward == t.reward == 0.0


class Clock:
    """The episodes' wall clock (``time.monotonic`` as spreadrl.rollout.episode reads it),
    moved by the test alone: a turn takes no time on it, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class SlowFuture(Future):
    """A reset that is done only when asked for, ``delay_s`` later on ``clock`` (a slow
    workbook load)."""

    def __init__(self, value, clock, delay_s):
        super().__init__()
        self.value, self.clock, self.delay_s = value, clock, delay_s

    def result(self, timeout=None):
        if not self.done():
            self.clock.now += self.delay_s
            self.set_result(self.value)
        return super().result(timeout)


class SlowResetPool(FakePool):
    """The last episode's reset takes ``delay_s`` on ``clock``; the others are immediate."""

    def __init__(self, slow_id, clock, delay_s):
        super().__init__()
        self.slow_id, self.clock, self.delay_s = slow_id, clock, delay_s

    def reset(self, episode_id, task, case):
        ready = super().reset(episode_id, task, case)
        if episode_id != self.slow_id:
            return ready
        return SlowFuture(ready.result(), self.clock, self.delay_s)


@pytest.mark.parametrize("scheduler", ["turn", "episode"])
def test_the_wall_clock_starts_at_the_first_scheduled_turn_not_at_reset(
    tiny_model, scheduler, monkeypatch
):
    # episode 0 is reset first, then waits 3 s for episode 1's reset before any turn is
    # scheduled: timed from its reset it would be out of its 2 s at its first turn. The
    # clock is the test's own, so the turns take no time on it on any machine.
    from spreadrl.rollout import episode
    from tests.rollout.test_streaming import ContextPolicy

    _, tok = tiny_model
    clock = Clock()
    monkeypatch.setattr(episode, "time", clock)
    jobs = [EpisodeJob(make_task(), 1, 0), EpisodeJob(make_task(), 1, 1)]
    pool = SlowResetPool(jobs[1].episode_id, clock, delay_s=3.0)
    settings = RolloutConfig(episode_wall_time_s=2.0, max_turns=5, scheduler=scheduler)
    out = run_episodes(ContextPolicy(tok, tool_turns=1), pool, jobs, settings, EpisodeChat.of(tok))
    assert clock.now == 1003.0  # the slow reset happened, before the episodes' clocks started
    assert [t.stop_reason for t in out.trajectories] == [EndReason.ANSWERED] * 2
    assert all(t.turns == 2 and t.passed for t in out.trajectories)
    assert [t.timings["wall_s"] for t in out.trajectories] == [0.0, 0.0]

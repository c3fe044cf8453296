"""Reward terms, and that every configured term reaches the shaped reward."""

from dataclasses import replace

import pytest

from spreadrl.train.config import RewardConfig
from spreadrl.train.rewards import (
    outcome_reward,
    overlong_penalty,
    shape_reward,
    tool_call_reward,
)

BASE = RewardConfig(overlong_max_length=100, overlong_buffer=20)


def test_outcome_reward_is_binary():
    assert (outcome_reward(True), outcome_reward(False)) == (1.0, 0.0)


def test_tcr_values():
    assert tool_call_reward(True, 7) == 1.0
    assert tool_call_reward(True, 0) == 1.0
    assert tool_call_reward(False, 0) == pytest.approx(-1.0)
    assert tool_call_reward(False, 1) == pytest.approx(-0.9)
    assert tool_call_reward(False, 2) == pytest.approx(-0.8)
    assert tool_call_reward(False, 4) == pytest.approx(-0.6)
    assert tool_call_reward(False, 10) == pytest.approx(-0.6)  # capped
    assert tool_call_reward(False, 3, per_call=0.2, cap=-0.5) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="num_tool_calls"):
        tool_call_reward(False, -1)


def test_overlong_penalty():
    assert overlong_penalty(80, 100, 20) == 0.0  # up to max - buffer: free
    assert overlong_penalty(81, 100, 20) == pytest.approx(-0.05)
    assert overlong_penalty(90, 100, 20) == pytest.approx(-0.5)
    assert overlong_penalty(100, 100, 20, factor=2.0) == pytest.approx(-2.0)
    assert overlong_penalty(110, 100, 20) == pytest.approx(-1.5)  # past the limit: keeps falling
    assert overlong_penalty(10_000, 100, 0) == 0.0  # no buffer: off


def test_turn_count_reaches_the_tool_call_reward():
    # the public recipe dropped num_tool_calls on the way to the reward: it must arrive
    cfg = replace(BASE, tool_call_reward=True)
    none, _ = shape_reward(cfg, False, 0, 10)
    three, parts = shape_reward(cfg, False, 3, 10)
    assert none == pytest.approx(-1.0) and three == pytest.approx(-0.7)
    assert parts == {"tcr": pytest.approx(-0.7)}
    assert shape_reward(cfg, True, 3, 10) == (1.0, {"tcr": 1.0})


FULL = replace(BASE, tool_call_reward=True, overlong=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_call_reward", False),
        ("tcr_wrong", -2.0),
        ("tcr_per_call", 0.05),
        ("tcr_cap", -0.9),
        ("overlong", False),
        ("overlong_factor", 2.0),
        ("overlong_buffer", 10),
        ("overlong_max_length", 200),
    ],
)
def test_each_configured_term_changes_the_result(field, value):
    # a wrong answer with 3 tool calls and 95 tokens: -0.7 (TCR) - 0.75 (overlong)
    assert shape_reward(FULL, False, 3, 95)[0] == pytest.approx(-1.45)
    changed = shape_reward(replace(FULL, **{field: value}), False, 3, 95)[0]
    assert changed != pytest.approx(-1.45)


def test_every_episode_input_reaches_the_reward():
    base = shape_reward(FULL, False, 3, 95)[0]
    assert shape_reward(FULL, True, 3, 95)[0] != base  # passed
    assert shape_reward(FULL, False, 2, 95)[0] != base  # num_tool_calls
    assert shape_reward(FULL, False, 3, 96)[0] != base  # response_length
    outcome_only = replace(BASE, overlong=False)
    assert shape_reward(outcome_only, True, 3, 95)[0] != shape_reward(outcome_only, False, 3, 95)[0]


def test_term_values_compose():
    assert shape_reward(BASE, False, 3, 95) == (0.0, {"outcome": 0.0})
    assert shape_reward(BASE, True, 3, 95)[0] == 1.0
    total, parts = shape_reward(replace(BASE, overlong=True, tool_call_reward=True), False, 3, 95)
    assert parts == {"tcr": pytest.approx(-0.7), "overlong": pytest.approx(-0.75)}
    assert total == pytest.approx(-1.45)


def test_overlong_limit_falls_back_to_the_rollout_budget():
    cfg = replace(BASE, overlong=True, overlong_max_length=0)
    assert shape_reward(cfg, True, 0, 95, max_length=100)[1]["overlong"] == pytest.approx(-0.75)
    with pytest.raises(ValueError, match="overlong_max_length or max_length"):
        shape_reward(cfg, True, 0, 95)


def test_the_outcome_is_the_environments_own_reward_when_it_grades():
    """A foreign OpenEnv server grades as it likes (echo: 0.1 a character): GRPO trains on
    that reward. Read as passed (reward >= 1.0), a 6-character echo answer scored 0.0."""
    cfg = RewardConfig()
    assert shape_reward(cfg, False, 0, 10, env_reward=0.6) == (0.6, {"outcome": 0.6})
    assert shape_reward(cfg, True, 0, 10, env_reward=1.0) == (1.0, {"outcome": 1.0})
    assert shape_reward(cfg, False, 0, 10) == (0.0, {"outcome": 0.0})  # no env reward: passed
    tcr = replace(cfg, tool_call_reward=True)  # TCR keeps judging by passed
    assert shape_reward(tcr, False, 0, 10, env_reward=0.6)[1] == {"tcr": -1.0}

"""A request's sampling comes from the recipe's rollout section, the one home of its defaults."""

from __future__ import annotations

import dataclasses

import pytest

from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn, RunValues, SamplingParams, sampling_params
from tests.rollout.fakes import FakePool, make_task


def test_sampling_params_have_no_defaults_of_their_own():
    """A default here would be a second copy of rollout.*: data sft-build once sampled
    256 tokens a turn (this type's default) where the recipe said 1,024."""
    fields = {f.name: f for f in dataclasses.fields(SamplingParams)}
    without = [n for n, f in fields.items() if f.default is not dataclasses.MISSING]
    assert without == ["seed"]  # a run value, not a setting (None: unseeded)


def test_a_request_samples_what_the_section_says():
    cfg = RolloutConfig(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens_per_turn=300)
    assert sampling_params(cfg, seed=5) == SamplingParams(0.7, 0.9, 20, 300, 5)
    assert sampling_params(cfg, seed=None, max_new_tokens=12).max_new_tokens == 12
    default = sampling_params(RolloutConfig(), seed=None)
    assert default.max_new_tokens == RolloutConfig().max_new_tokens_per_turn == 1024


def test_a_message_policy_gets_the_sections_sampling_and_the_runs_seed():
    seen = []

    class Recording:
        token_level = False

        def act_messages(self, states, params):
            seen.append(params)
            return [PolicyTurn(text="Done.") for _ in states]

    cfg = RolloutConfig(temperature=0.3, max_new_tokens_per_turn=77, max_turns=1)
    run_episodes(Recording(), FakePool(), [EpisodeJob(make_task())], cfg, run=RunValues(9))
    assert seen == [SamplingParams(0.3, 1.0, 0, 77, 9)]


def test_a_section_built_in_code_is_checked_like_yaml():
    with pytest.raises(ConfigError, match=r"rollout\.extra_calls 'drop'.*reject, skip"):
        RolloutConfig(extra_calls="drop")  # type: ignore[arg-type]

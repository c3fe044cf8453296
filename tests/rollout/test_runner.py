"""The agent loop with a fake environment pool and scripted policies (no model, no gym)."""

from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import NoopPolicy, format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from tests.rollout.fakes import FakePool, make_task


class ListPolicy:
    token_level = False

    def __init__(self, script):
        self.script = script  # list of texts, one per turn

    def act_messages(self, states, params):
        return [
            PolicyTurn(text=self.script[min(s.turns_taken, len(self.script) - 1)]) for s in states
        ]


def test_episode_with_a_tool_call_then_answer():
    good = format_tool_call("write_range", {"range": "A1", "values": 42})
    policy = ListPolicy([good, "Done."])
    pool = FakePool()
    out = run_episodes(
        policy, pool, [EpisodeJob(make_task(), 1, s) for s in range(3)], RolloutConfig()
    )
    assert len(out.trajectories) == 3
    for t in out.trajectories:
        assert t.passed and t.reward == 1.0
        assert t.stop_reason == "answered"
        assert t.turns == 2 and t.tool_calls == 1
        roles = [m["role"] for m in t.messages]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert t.metadata["family"] == "demo"


def test_malformed_call_becomes_error_observation_not_crash():
    policy = ListPolicy(["<tool_call>\n{not json\n</tool_call>", "Done."])
    out = run_episodes(policy, FakePool(), [EpisodeJob(make_task())], RolloutConfig())
    t = out.trajectories[0]
    assert t.parse_errors >= 1
    assert t.messages[3]["role"] == "tool" and t.messages[3]["content"].startswith("Error")
    assert not t.passed


def test_turn_budget_ends_episode():
    bad = format_tool_call("write_range", {"range": "A1"})
    out = run_episodes(
        ListPolicy([bad]), FakePool(), [EpisodeJob(make_task())], RolloutConfig(max_turns=3)
    )
    t = out.trajectories[0]
    assert t.stop_reason == "max_turns" and t.turns == 3
    assert t.tool_errors == 3


def test_tool_call_budget_reported():
    bad = format_tool_call("write_range", {"range": "A1"})
    out = run_episodes(
        ListPolicy([bad]), FakePool(max_calls=2), [EpisodeJob(make_task())], RolloutConfig()
    )
    assert out.trajectories[0].stop_reason == "max_tool_calls"


def test_crashed_episode_fails_alone():
    good = format_tool_call("write_range", {"range": "A1", "values": 42})
    jobs = [EpisodeJob(make_task(), 1, 0), EpisodeJob(make_task(), 1, 1)]
    out = run_episodes(ListPolicy([good, "Done."]), FakePool(crash="t1/1/0"), jobs, RolloutConfig())
    crashed, fine = out.trajectories
    assert crashed.stop_reason == "error" and "worker died" in crashed.error and not crashed.passed
    assert fine.passed


def test_noop_answers_at_once():
    out = run_episodes(NoopPolicy(), FakePool(), [EpisodeJob(make_task())], RolloutConfig())
    t = out.trajectories[0]
    assert t.turns == 1 and t.tool_calls == 0 and not t.passed and t.stop_reason == "answered"

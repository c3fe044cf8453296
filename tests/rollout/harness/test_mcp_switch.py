"""rollout.harness_mcp without the openenv extra: one ConfigError line, before any episode.

fastmcp is hidden (``sys.modules["fastmcp"] = None`` makes its import fail), so these
tests say the same in the main venv, where it is absent, and in ``.venv-envs``, where it
is installed. The served tools themselves are tested in tests/envs/test_harness_mcp.py.
"""

import sys

import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.errors import ConfigError
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness import episode_runner
from spreadrl.rollout.harness.episodes import HarnessEpisodes
from spreadrl.rollout.harness.program import HarnessProgram
from spreadrl.rollout.runner import EpisodeJob, RunValues
from tests.rollout.harness.scripted import ScriptedTokenPolicy
from tests.rollout.harness.test_harness_episodes import AGENT, workbook_task

INSTALL = "pip install 'spreadrl[openenv]'"


@pytest.fixture()
def no_fastmcp(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastmcp", None)


def test_the_switch_needs_a_harness():
    with pytest.raises(ConfigError, match="set rollout.harness too"):
        RolloutConfig(harness_mcp=True).validate()
    RolloutConfig(harness=f"{AGENT}:run", harness_mcp=True).validate()


def test_without_fastmcp_the_runner_is_refused_in_one_line(no_fastmcp):
    rollout = RolloutConfig(harness=f"{AGENT}:run", harness_mcp=True)
    with pytest.raises(ConfigError) as refused:
        episode_runner(rollout, EnvConfig())
    message = str(refused.value)
    assert INSTALL in message and "rollout.harness_mcp" in message
    assert "\n" not in message
    # off, the same harness needs no fastmcp
    assert isinstance(
        episode_runner(RolloutConfig(harness=f"{AGENT}:run"), EnvConfig()), HarnessEpisodes
    )


def test_without_fastmcp_no_episode_starts(no_fastmcp, tmp_path, tiny_model):
    chat = EpisodeChat.of(tiny_model[1])
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    runner = HarnessEpisodes(
        HarnessProgram.parse(f"{AGENT}:run"), EnvConfig(), workdir_root=str(tmp_path / "episodes")
    )
    jobs = [EpisodeJob(workbook_task(tmp_path), 1, s) for s in range(2)]
    cfg = RolloutConfig(max_turns=2, harness=f"{AGENT}:run", harness_mcp=True)
    with pytest.raises(ConfigError, match=r"pip install 'spreadrl\[openenv\]'"):
        runner(policy, None, jobs, cfg, chat, run=RunValues(seed=1))
    assert policy.contexts == []  # the model was never called
    assert not (tmp_path / "episodes").exists()  # no episode folder, no fork server

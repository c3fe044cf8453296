"""A folder of TrainingTraces as GRPO's episodes (``rollout.traces``)."""

import json
from pathlib import Path

import pytest

from spreadrl.errors import ConfigError
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness import episode_runner
from spreadrl.rollout.harness.trace_folder import TraceEpisodes
from spreadrl.rollout.runner import EpisodeJob
from spreadrl.rollout.types import EndReason
from tests.rollout.harness.test_harness_episodes import workbook_task


def turn(node: str, prompt: list[int], completion: list[int], **extra) -> dict:
    return {
        "node_id": node,
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "per_token_logps": [-0.5] * len(completion),
        "loss_mask": [0] * len(prompt) + [1] * len(completion),
        **extra,
    }


def write_group(folder: Path, name: str, episodes: dict[str, object], rewards=None) -> None:
    group = folder / name
    group.mkdir(parents=True)
    for stem, data in episodes.items():
        (group / f"{stem}.json").write_text(json.dumps(data))
    if rewards is not None:
        (group / "rewards.json").write_text(json.dumps(rewards))


def jobs(tmp_path: Path, n: int) -> list[EpisodeJob]:
    task = workbook_task(tmp_path)
    return [EpisodeJob(task, 1, i) for i in range(n)]


def test_traces_become_episodes_with_the_reward_they_or_their_verifier_carry(tmp_path):
    folder = tmp_path / "traces"
    two_turns = {
        "schema_version": 1,
        "turns": [turn("a#0", [1, 2], [3, 4]), turn("a#1", [1, 2, 3, 4, 5], [6])],
    }
    # the proxy's trace entries, one of them scored by the environment
    entries = {"entries": [turn("b#0", [1, 2], [7], reward=1.0)]}
    write_group(folder, "g0", {"e0": two_turns, "e1": entries}, rewards={"e0": 0.0, "e1": 0.0})
    write_group(folder, "g1", {"e0": two_turns, "e1": two_turns}, rewards={"e0": 1.0})
    runner = TraceEpisodes.of(str(folder))
    cfg = RolloutConfig(group_size=2)
    out = runner(None, None, jobs(tmp_path, 4), cfg).trajectories
    first, scored, verified, unscored = out
    assert (first.prompt_ids, first.response_ids) == ([1, 2], [3, 4, 5, 6])
    assert first.response_mask == [1, 1, 0, 1]
    assert first.rollout_logprobs == [-0.5, -0.5, 0.0, -0.5]
    assert first.reward == 0.0 and first.turns == 2 and not first.crashed
    assert scored.reward == 1.0  # the trace's own reward wins over rewards.json's 0.0
    assert verified.reward == 1.0 and verified.task_id == "g1"
    assert unscored.crashed and "no reward" in unscored.error  # never a zero reward
    assert unscored.stop_reason == EndReason.ERROR
    # the next step starts over at the first group
    again = runner(None, None, jobs(tmp_path, 2), cfg).trajectories
    assert [t.task_id for t in again] == ["g0", "g0"]


def test_a_group_of_the_wrong_size_or_no_folder_is_one_config_error(tmp_path):
    folder = tmp_path / "traces"
    write_group(folder, "g0", {"e0": {"schema_version": 1, "turns": []}})
    with pytest.raises(ConfigError, match="1 episodes, rollout.group_size is 2"):
        TraceEpisodes.of(str(folder))(None, None, jobs(tmp_path, 2), RolloutConfig(group_size=2))
    with pytest.raises(ConfigError, match="no folder"):
        TraceEpisodes.of(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="both name"):
        RolloutConfig(traces=str(folder), harness="agent.py:run").validate()


def test_grpo_takes_its_episodes_from_the_traces_when_named(tmp_path):
    from spreadrl.env.config import EnvConfig
    from spreadrl.rollout.runner import run_episodes

    folder = tmp_path / "traces"
    write_group(folder, "g0", {"e0": {"schema_version": 1, "turns": []}})
    assert isinstance(episode_runner(RolloutConfig(traces=str(folder)), EnvConfig()), TraceEpisodes)
    assert episode_runner(RolloutConfig(), EnvConfig()) is run_episodes

"""Captured episodes written as OpenEnv TrainingTrace JSON and read back as the same samples."""

import json

import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.episodes import HarnessEpisodes
from spreadrl.rollout.harness.program import HarnessProgram
from spreadrl.rollout.harness.trace import TraceError, samples_from_trace
from spreadrl.rollout.runner import EpisodeJob, RunValues
from tests.rollout.harness.scripted import ScriptedTokenPolicy
from tests.rollout.harness.test_harness_episodes import AGENT, chat, workbook_task  # noqa: F401


def traced(tmp_path, chat, function):  # noqa: F811
    program = HarnessProgram.parse(f"{AGENT}:{function}")
    runner = HarnessEpisodes(program, EnvConfig(), keep_traces=True)
    jobs = [EpisodeJob(workbook_task(tmp_path), 1, s) for s in range(2)]
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    return runner(policy, None, jobs, RolloutConfig(max_turns=4), chat, run=RunValues(seed=2))


@pytest.mark.parametrize(("function", "breaks"), [("run", 0), ("edited", 1)])
def test_a_written_trace_reads_back_as_the_episodes_samples(tmp_path, chat, function, breaks):  # noqa: F811
    for traj in traced(tmp_path, chat, function).trajectories:
        trace = json.loads(json.dumps(traj.metadata["training_trace"]))  # as a file holds it
        assert trace["schema_version"] == 1 and len(trace["turns"]) == traj.turns == 2
        for turn in trace["turns"]:
            assert len(turn["loss_mask"]) == len(turn["prompt_token_ids"]) + len(
                turn["completion_token_ids"]
            )
        samples, found = samples_from_trace(trace)
        assert found == breaks == traj.metadata["harness_prefix_breaks"]
        first = samples[0]
        assert first.prompt_ids == traj.prompt_ids
        assert first.response_ids == traj.response_ids
        assert first.response_mask == traj.response_mask
        assert first.logprobs == traj.rollout_logprobs
        assert [s.to_json() for s in samples[1:]] == traj.metadata["harness_samples"]


def test_a_trace_whose_fields_do_not_line_up_is_refused():
    turn = {
        "node_id": "a",
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3],
        "per_token_logps": [-0.1, -0.2],
        "loss_mask": [0, 0, 1],
    }
    with pytest.raises(TraceError, match="2 log-probs for 1 completion tokens"):
        samples_from_trace({"schema_version": 1, "turns": [turn]})
    turn = {**turn, "per_token_logps": [-0.1], "loss_mask": [1, 0, 1]}
    with pytest.raises(TraceError, match="prompt \\(all 0\\)"):
        samples_from_trace({"schema_version": 1, "turns": [turn]})
    with pytest.raises(TraceError, match="schema_version 2"):
        samples_from_trace({"schema_version": 2, "turns": []})

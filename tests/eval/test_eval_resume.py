"""An eval stopped by Ctrl-C and resumed into the same folder gives the report an
uninterrupted eval gives: every episode samples from the seed it would have had."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from spreadrl.data.task import TaskSet
from spreadrl.eval.runner import run_eval
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.hf import HFPolicy
from spreadrl.rollout.runner import run_episodes
from spreadrl.rollout.types import RunValues
from tests.rollout.fakes import FakePool, make_task

CFG = RolloutConfig(temperature=1.0, max_turns=1, max_new_tokens_per_turn=6, max_response_tokens=12)


def _episodes(out: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    return {f"{r['task_id']}/{r['case']}/{r['sample']}": json.dumps(r["messages"]) for r in rows}


def _eval(tasks, policy, tokenizer, out, episodes=run_episodes):
    return run_eval(
        tasks, policy, FakePool(), CFG, out, run=RunValues(seed=5), tokenizer=tokenizer,
        samples=2, batch_size=2, episodes=episodes,
    )  # fmt: skip


def test_an_eval_stopped_after_a_batch_and_resumed_samples_what_one_run_samples(
    tiny_model, tmp_path
):
    model, tokenizer = tiny_model
    policy = HFPolicy(model, tokenizer)
    # 3 tasks x 2 samples: 6 episodes in batches of 2
    tasks = TaskSet(Path("."), [replace(make_task(), id=f"t{i}") for i in range(3)])
    whole = _eval(tasks, policy, tokenizer, tmp_path / "whole")

    calls = []

    def stopped_in_the_second_batch(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C while the second batch runs
            raise KeyboardInterrupt
        return run_episodes(*args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        _eval(tasks, policy, tokenizer, tmp_path / "resumed", stopped_in_the_second_batch)
    partial = json.loads((tmp_path / "resumed" / "report.json").read_text())
    assert partial["episodes"] == 2 and partial["episodes_planned"] == 6
    assert partial["complete"] is False
    resumed = _eval(tasks, policy, tokenizer, tmp_path / "resumed")

    assert resumed["complete"] is True and whole["complete"] is True
    a, b = _episodes(tmp_path / "whole"), _episodes(tmp_path / "resumed")
    assert len(a) == 6 and a == b
    assert len(set(a.values())) > 1  # sampled: the episodes differ, so the seeds matter
    assert {k: v for k, v in resumed.items() if not k.startswith("wall_s") and k != "timings"} == {
        k: v for k, v in whole.items() if not k.startswith("wall_s") and k != "timings"
    }

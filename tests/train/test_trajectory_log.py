"""GRPO saves a few trajectories per step (spread over the reward range) for spreadrl view."""

import json
from pathlib import Path

import pytest

from spreadrl.data.task import TaskSet
from spreadrl.rollout.types import Trajectory
from spreadrl.train.grpo import train_grpo
from spreadrl.train.step_metrics import pick_spread, save_step_trajectories
from tests.rollout.fakes import FakePool, make_task
from tests.train.test_grpo_e2e import _cfg


def test_pick_spread_keeps_both_ends_of_the_reward_range():
    rewards = [0.3, -1.0, 0.9, 0.1, 0.5, -0.2, 0.7, 0.0]
    assert pick_spread(rewards, 2) == [1, 2]  # lowest and highest
    picked = pick_spread(rewards, 3)
    assert len(picked) == 3 and 1 in picked and 2 in picked
    assert pick_spread(rewards, 20) == list(range(8))
    assert pick_spread(rewards, 0) == [] and pick_spread([], 3) == []


def test_saved_rows_carry_step_reward_parts_and_no_tokens(tmp_path):
    trajs = [
        Trajectory("t1", 1, s, [{"role": "user", "content": "hi"}], response_ids=[1, 2], reward=s)
        for s in range(4)
    ]
    parts = [{"outcome": float(s)} for s in range(4)]
    assert save_step_trajectories(tmp_path, 7, trajs, parts, 2) == 2
    rows = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert [(r["step"], r["sample"], r["reward_parts"]) for r in rows] == [
        (7, 0, {"outcome": 0.0}),
        (7, 3, {"outcome": 3.0}),
    ]
    assert "response_ids" not in rows[0] and rows[0]["messages"][0]["content"] == "hi"


@pytest.mark.slow
def test_grpo_appends_trajectories_to_the_run(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    cfg = _cfg(tiny_model_dir, out, 1, ["logging.trajectories_per_step=3"])
    train_grpo(cfg, pool=FakePool(), tasks=TaskSet(Path("."), [make_task()]))
    rows = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 1, 1]
    for r in rows:
        assert r["task_id"] == "t1" and r["messages"][0]["role"] == "system"
        assert set(r["reward_parts"]) == {"outcome", "overlong"}, r["reward_parts"]

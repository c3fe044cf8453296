"""The held-out eval inside the GRPO loop (eval.every_steps): runs when due, logs eval/*."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.data.task import TaskSet
from spreadrl.errors import ConfigError
from spreadrl.train import episodes
from spreadrl.train.config import GRPOConfig
from spreadrl.train.episodes import eval_due, held_out_jobs
from spreadrl.train.grpo import train_grpo
from tests.rollout.fakes import FakePool, make_task


def test_eval_due_every_n_steps_and_after_the_last():
    cfg = load_config(GRPOConfig, None, ["steps=5", "eval.every_steps=2"])
    assert [s for s in range(1, 6) if eval_due(cfg.eval, s, cfg.steps)] == [2, 4, 5]
    off = load_config(GRPOConfig, None, ["steps=5"])
    assert not any(eval_due(off.eval, s, off.steps) for s in range(1, 6))


def test_held_out_jobs_take_the_first_cases_and_samples():
    tasks = TaskSet(Path("."), [make_task()])
    cfg = load_config(GRPOConfig, None, ["eval.samples=3", "eval.max_cases=1"])
    jobs = held_out_jobs(tasks, cfg.eval)
    assert [(j.task.id, j.case, j.sample) for j in jobs] == [
        ("t1", 1, 0),
        ("t1", 1, 1),
        ("t1", 1, 2),
    ]


@pytest.mark.slow
def test_grpo_runs_the_held_out_eval_inside_the_loop(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    cfg = load_config(
        GRPOConfig,
        None,
        [
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={out}",
            "steps=2",
            "device=cpu",
            "rollout.group_size=2",
            "rollout.prompts_per_step=1",
            "rollout.max_turns=1",
            "rollout.max_new_tokens_per_turn=8",
            "rollout.max_response_tokens=16",
            "sampling.mode=keep",
            "env.tools=[write_range]",
            "eval.every_steps=2",
            "eval.samples=3",
        ],
    )
    tasks = TaskSet(Path("."), [make_task()])
    train_grpo(cfg, pool=FakePool(), tasks=tasks, eval_tasks=tasks)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert "eval/pass@1" not in metrics[0]
    assert metrics[1]["eval/episodes"] == 3 and 0.0 <= metrics[1]["eval/pass@1"] <= 1.0
    assert metrics[1]["eval/generated_tokens"] > 0


def test_the_held_out_eval_samples_at_eval_temperature(monkeypatch):
    """Upstream validates greedily (val_kwargs.temperature=0): eval.temperature sets that."""
    import contextlib
    from types import SimpleNamespace

    from spreadrl.train.distributed import DistInfo

    seen = []

    def fake_run(policy, pool, jobs, cfg, chat, run):
        seen.append(cfg.temperature)
        return SimpleNamespace(trajectories=[])

    monkeypatch.setattr(episodes, "run_episodes", fake_run)
    monkeypatch.setattr(episodes, "generating", lambda *a: contextlib.nullcontext())
    tasks = TaskSet(Path("."), [make_task()])
    for overrides, expected in ((["eval.temperature=0"], 0.0), ([], 0.6)):
        cfg = load_config(GRPOConfig, None, ["rollout.temperature=0.6", *overrides])
        side = episodes.EpisodeSide(
            tasks=tasks,
            sampler=None,
            engine=None,
            pool=FakePool(),
            chat=None,
            rollout=cfg.rollout,
            sampling=cfg.sampling,
            reward=cfg.reward,
            evaluation=cfg.eval,
            eval_tasks=tasks,
            steps=1,
            seed=0,
            max_prompt_tokens=64,
            info=DistInfo(),
            runner=fake_run,  # who plays the episodes: the side's runner, not a module name
        )
        side.run_held_out(tasks, 1, SimpleNamespace(policy=None), None, "float32")
        assert seen[-1] == expected
    assert cfg.rollout.temperature == 0.6  # training keeps its own temperature


def test_spreadrl_eval_takes_the_recipes_eval_temperature_unless_told(tmp_path):
    from spreadrl.cli.eval import load_eval_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("rollout:\n  temperature: 0.6\neval:\n  temperature: 0.0\n")
    assert load_eval_recipe(recipe, []).rollout.temperature == 0.0
    assert load_eval_recipe(recipe, ["rollout.temperature=0.9"]).rollout.temperature == 0.9
    with pytest.raises(ConfigError, match="eval.temperature must be >= 0"):
        load_eval_recipe(recipe, ["eval.temperature=-1"])

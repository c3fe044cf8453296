"""`spreadrl eval` with the user's own agent (``rollout.harness``) playing the episodes."""

from __future__ import annotations

import json

from spreadrl.env.config import EnvConfig
from spreadrl.eval.recipe import EngineSpec, EpisodeSettings, EvalSpec, evaluate
from spreadrl.reporting import LogReporter
from spreadrl.rollout.config import RolloutConfig
from tests.rollout.harness.test_harness_episodes import AGENT
from tests.train.test_grpo_smoke import _two_tasks


def test_an_eval_through_a_harness_scores_the_workbooks_it_leaves(tmp_path, tiny_model_dir):
    """Two tasks, the first one's input already its answer; the mirror agent only chats, so
    the checker passes the first and fails the second, and each episode is the harness's."""
    tasks, solved, _ = _two_tasks(tmp_path / "tasks")
    rollout = RolloutConfig(max_turns=2, max_new_tokens_per_turn=8, harness=f"{AGENT}:run")
    episode = EpisodeSettings(rollout, EnvConfig(), max_prompt_tokens=0)
    spec = EvalSpec(model=str(tiny_model_dir), backend="hf", tasks=str(tasks), samples=1, seed=0)
    out = tmp_path / "eval"
    report = evaluate(
        episode,
        spec,
        EngineSpec(device="cpu", base_url=None, batch_size=8),
        out,
        recipe=None,
        skip_bad=False,
        reporter=LogReporter(),
    )
    assert report["episode_errors"] == 0 and report["harness"] == f"{AGENT}:run"
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert {r["metadata"]["harness"] for r in rows} == {f"{AGENT}:run"}
    assert {r["task_id"]: r["passed"] for r in rows}[solved] is True
    assert sum(r["passed"] for r in rows) == 1
    assert len(list((out / "outputs").rglob("*.xlsx"))) == 2  # the workbooks it left, kept

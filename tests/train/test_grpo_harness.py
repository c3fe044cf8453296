"""GRPO through a harness: a step through the example agent moves the weights, and the
loss on a harness's samples is the built-in loop's on the same samples."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import spreadrl.env.spreadsheet.checker as checker
from spreadrl.cli.main import main
from spreadrl.env.config import EnvConfig
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.episodes import HarnessEpisodes
from spreadrl.rollout.harness.program import HarnessProgram
from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes
from spreadrl.train.episodes import to_samples
from spreadrl.train.rewards import group_advantages
from spreadrl.train.trained_model import policy_update
from tests.rollout.fakes import FakePool
from tests.rollout.harness.scripted import ScriptedTokenPolicy
from tests.rollout.harness.test_harness_episodes import AGENT, workbook_task
from tests.train.test_grpo_smoke import RECIPE, _stops_often, _two_tasks
from tests.train.update_args import update_args

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "harness" / "openai_agent.py"


@pytest.mark.slow
def test_a_grpo_step_through_the_example_harness_moves_the_weights(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("openai", reason="the example harness uses the openai client (dev extra)")
    tasks, solved, _ = _two_tasks(tmp_path / "tasks")
    model_dir = _stops_often(tiny_model_dir, tmp_path / "model")
    verdicts: list[bool] = []
    real_check = checker.check_workbook

    def spy(output, answer, position, **kwargs):
        result = real_check(output, answer, position, **kwargs)
        verdicts.append(result.passed)
        return result

    monkeypatch.setattr(checker, "check_workbook", spy)
    played: list[int] = []  # episodes per HarnessEpisodes call: the step's, then held-out's
    real_call = HarnessEpisodes.__call__

    def count(self, policy, pool, jobs, *args, **kwargs):
        played.append(len(jobs))
        return real_call(self, policy, pool, jobs, *args, **kwargs)

    monkeypatch.setattr(HarnessEpisodes, "__call__", count)
    out = tmp_path / "run"
    args = ["spreadrl", "grpo", "--config", str(RECIPE)]
    args += [
        f"model.name_or_path={model_dir}",
        f"data.train_tasks={tasks}",
        f"output_dir={out}",
        "steps=1",
        "rollout.group_size=4",
        "rollout.prompts_per_step=2",
        "rollout.max_new_tokens_per_turn=16",
        "rollout.max_response_tokens=48",
        f"rollout.harness={EXAMPLE}:run",
        "reward.overlong=true",
        "reward.overlong_buffer=47",
        "sampling.mode=keep",
        "optim.lr=1e-3",
        "eval.every_steps=1",  # held-out after the step, played by the harness too
        f"eval.tasks={tasks}",
        "eval.max_cases=2",
    ]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None), capsys.readouterr().err
    assert played == [8, 2]  # the step's 8 episodes, then 2 held-out ones, all the harness's
    assert len(verdicts) == 10  # every episode's workbook went to the gym's checker
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["trained_sequences"] == 8
    assert metrics["harness_errors"] == 0 and "harness_prefix_breaks" in metrics
    before = load_file(str(model_dir / "model.safetensors"))
    after = load_file(str(out / "final" / "model.safetensors"))
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(moved) > len(before) // 2, moved


def test_the_loss_on_harness_samples_is_the_built_in_loss(tmp_path, tiny_model, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    _, tokenizer = tiny_model
    chat = EpisodeChat.of(tokenizer)
    task = workbook_task(tmp_path)
    jobs = [EpisodeJob(task, 1, s) for s in range(4)]
    cfg, run = RolloutConfig(max_turns=4), RunValues(seed=5)
    stop = chat.fmt.stop_ids[0]
    built_in = run_episodes(
        ScriptedTokenPolicy(tokenizer, stop), FakePool(), jobs, cfg, chat, run=run
    )
    harness = HarnessEpisodes(HarnessProgram.parse(f"{AGENT}:run"), EnvConfig())
    through = harness(ScriptedTokenPolicy(tokenizer, stop), None, jobs, cfg, chat, run=run)
    advantages = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    keep = torch.ones(1, dtype=torch.bool)
    losses, updates = [], []
    for trajs in (built_in.trajectories, through.trajectories):
        samples = to_samples(trajs, advantages, keep, 4)
        assert len(samples) == 4
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        metrics = policy_update(model, opt, samples, *update_args(grad_clip=1e9), pad_id=0)
        losses.append(metrics["loss"])
        updates.append({k: model.state_dict()[k] - before[k] for k in before})
    assert losses[0] == losses[1]  # (0 here: equal lengths, advantages summing to 0)
    assert all(torch.equal(updates[0][k], updates[1][k]) for k in updates[0])
    assert any(update.abs().sum() > 0 for update in updates[0].values())

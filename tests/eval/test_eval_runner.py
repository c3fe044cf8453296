"""`spreadrl eval` from a recipe, and the report's generated-token count."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from spreadrl.cli.main import app
from spreadrl.data.sources import resolve_tasks
from spreadrl.data.task import TaskSet
from spreadrl.eval.runner import run_eval
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.types import PolicyTurn
from tests.rollout.fakes import FakePool, make_task

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.yaml"
runner = CliRunner()


class CountingPolicy:
    """A token-level policy that samples scripted texts and counts what it sampled."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.turn, self.sampled = tokenizer, texts, 0, 0

    def act(self, contexts, params, *, seeds=None):
        text = self.texts[min(self.turn, len(self.texts) - 1)]
        self.turn += 1
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [end]
        self.sampled += len(ids) * len(contexts)
        return [PolicyTurn(text, list(ids), [-0.1] * len(ids), "stop") for _ in contexts]


def test_the_report_counts_generated_tokens_of_a_token_level_policy(tiny_model, tmp_path):
    """report.json is built from trajectories.jsonl, which keeps no token ids: the count
    must survive the round trip (it read 0.0 for every hf run before)."""
    _, tok = tiny_model
    call = format_tool_call("write_range", {"range": "A1", "values": 42})
    policy = CountingPolicy(tok, [call, "Done."])
    tasks = TaskSet(Path("."), [make_task()])
    report = run_eval(tasks, policy, FakePool(), RolloutConfig(), tmp_path, tokenizer=tok)
    assert report["episodes"] == 1 and report["pass@1"] == 1.0
    assert report["mean_generated_tokens"] == policy.sampled > 0
    saved = json.loads((tmp_path / "trajectories.jsonl").read_text().splitlines()[0])
    assert saved["generated_tokens"] == policy.sampled and "response_ids" not in saved


def test_eval_from_a_recipe_records_its_settings_and_flags_override(tmp_path):
    out = tmp_path / "oracle"
    args = ["eval", "--config", str(RECIPE), "--backend", "oracle", "--tasks", "builtin:demo-test"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    recorded = yaml.safe_load((out / "config.yaml").read_text())
    recipe = yaml.safe_load(RECIPE.read_text())
    assert recorded["rollout"]["max_turns"] == recipe["rollout"]["max_turns"] == 2
    assert recorded["env"]["tools"] == recipe["env"]["tools"]
    assert json.loads((out / "report.json").read_text())["pass@1"] == 1.0
    # a flag wins over the recipe, and a dotted override too
    out2 = tmp_path / "flags"
    result = runner.invoke(
        app, [*args, "--out", str(out2), "--max-turns", "3", "env.max_observation_chars=500"]
    )
    assert result.exit_code == 0, result.output
    recorded = yaml.safe_load((out2 / "config.yaml").read_text())
    assert recorded["rollout"]["max_turns"] == 3
    assert recorded["env"]["max_observation_chars"] == 500
    assert (
        recorded["rollout"]["max_new_tokens_per_turn"]
        == recipe["rollout"]["max_new_tokens_per_turn"]
    )


def test_eval_takes_its_task_set_and_samples_from_the_recipes_eval_section(tmp_path):
    """`spreadrl eval --config` reads the recipe's eval section (issue 24): with no
    --tasks / --samples the run scores eval.tasks, eval.samples times each case."""
    out = tmp_path / "section"
    args = ["eval", "--config", str(RECIPE), "--backend", "noop", "--out", str(out)]
    result = runner.invoke(app, [*args, "eval.tasks=builtin:demo-test", "eval.samples=2"])
    assert result.exit_code == 0, result.output
    run = yaml.safe_load((out / "config.yaml").read_text())["eval"]
    assert (run["tasks"], run["samples"]) == ("builtin:demo-test", 2)
    report = json.loads((out / "report.json").read_text())
    cases = len(resolve_tasks("builtin:demo-test").episodes())
    assert report["episodes"] == 2 * cases
    # the flags still win over the section
    out2 = tmp_path / "flags"
    flags = ["--tasks", "builtin:demo-test", "--samples", "1", "--out", str(out2)]
    result = runner.invoke(app, [*args[:-2], *flags, "eval.tasks=builtin:nope", "eval.samples=3"])
    assert result.exit_code == 0, result.output
    run = yaml.safe_load((out2 / "config.yaml").read_text())["eval"]
    assert (run["tasks"], run["samples"]) == ("builtin:demo-test", 1)


def test_eval_without_a_recipe_uses_the_training_defaults(tmp_path):
    from spreadrl.rollout.config import RolloutConfig

    out = tmp_path / "noop"
    result = runner.invoke(
        app, ["eval", "--backend", "noop", "--tasks", "builtin:demo-test", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    recorded = yaml.safe_load((out / "config.yaml").read_text())
    defaults = RolloutConfig()
    assert recorded["rollout"]["max_turns"] == defaults.max_turns
    assert recorded["rollout"]["max_tool_response_tokens"] == defaults.max_tool_response_tokens
    assert recorded["rollout"]["max_new_tokens_per_turn"] == defaults.max_new_tokens_per_turn


def test_eval_compare_still_dispatches_beside_the_overrides(tmp_path):
    """`spreadrl eval compare A B` shares the group with `eval [overrides]`."""
    for name, rate in (("a", 0.5), ("b", 1.0)):
        (tmp_path / name).mkdir()
        report = {"pass@1": rate, "soft": rate, "hard": rate, "per_case": {"t1/1": rate}}
        (tmp_path / name / "report.json").write_text(json.dumps(report))
    result = runner.invoke(app, ["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert "improved cases: 1" in result.output


def test_eval_on_vllm_sizes_the_engine_from_the_recipe(tiny_model_dir, tmp_path, monkeypatch):
    """An eval engine built with the model's own limit (262,144 positions for
    Qwen3-4B-Thinking) would reserve a KV cache for it; the 4B recipe's prompt +
    response budget is what an episode can use, so that is what vLLM is given."""
    import torch

    from tests.rollout import fake_vllm

    fake_vllm.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fake_vllm.FakeLLM.instances.clear()
    recipe = RECIPE.parent / "grpo-tcr-4b.yaml"
    args = ["eval", "--config", str(recipe), "--backend", "vllm", "--model", str(tiny_model_dir)]
    # the 4B recipe's environment is the code one: its own tasks (an episode error fails the eval)
    code_args = [
        *args,
        "--tasks",
        "builtin-code:test",
        "--samples",
        "1",
        "--out",
        str(tmp_path / "v"),
    ]
    result = runner.invoke(app, [*code_args, "--max-turns", "1"])
    assert result.exit_code == 0, result.output
    (engine,) = fake_vllm.FakeLLM.instances
    budgets = yaml.safe_load(recipe.read_text())
    expected = budgets["data"]["max_prompt_tokens"] + budgets["rollout"]["max_response_tokens"]
    assert engine.kwargs["max_model_len"] == expected == 2560 + 10480
    # with no prompt budget there is no bound to give: the model's own limit
    fake_vllm.FakeLLM.instances.clear()
    args[2] = str(RECIPE)  # tiny-cpu: data.max_prompt_tokens 0
    args += ["--tasks", "builtin:demo-test", "--samples", "1", "--out", str(tmp_path / "w")]
    result = runner.invoke(app, [*args, "--max-turns", "1"])
    assert result.exit_code == 0, result.output
    assert fake_vllm.FakeLLM.instances[0].kwargs["max_model_len"] is None

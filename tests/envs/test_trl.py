"""TRL's GRPOTrainer (environment_factory, TRL 1.16) takes 2 steps on CPU against
`spreadrl env serve`, and its rewards are spreadrl's checker on the same calls."""

from __future__ import annotations

import inspect

import pytest

from spreadrl.data.task import load_tasks
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import replay
from spreadrl.rollout.config import DEFAULT_SYSTEM_PROMPT
from tests.envs.conftest import TOOLS

pytestmark = pytest.mark.envs


def test_the_tool_methods_are_the_servers_tools_and_own_the_reward(openenv_url, tasks_dir):
    from transformers.utils import get_json_schema

    from spreadrl.integrations.trl_env import environment_factory

    rollout_cls = environment_factory(openenv_url)
    env = rollout_cls()
    schema = get_json_schema(rollout_cls.write_range)["function"]
    assert schema["name"] == "write_range"
    assert set(schema["parameters"]["required"]) == {"range", "values"}

    task = load_tasks(tasks_dir).tasks[3]
    assert env.reset(task_id=task.id).startswith("\n\nWorkbook")
    for call in task.case(1).load_solution():
        assert not getattr(env, call["name"])(**call["arguments"]).startswith("Error")
    assert env.get_reward() == 1.0
    env.reset(task_id=task.id)
    assert env.get_reward() == 0.0


def test_trl_grpo_takes_two_steps_and_its_rewards_are_the_checkers(
    openenv_url, tasks_dir, tiny_model_dir, tmp_path
):
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen3_template

    from spreadrl.integrations.trl_env import environment_factory

    scored: list[tuple[str, list[dict], float]] = []
    base = environment_factory(openenv_url)

    class Recorded(base):
        def get_reward(self) -> float:
            reward = super().get_reward()
            scored.append((self.task_id, list(self.calls), reward))
            return reward

    tasks = list(load_tasks(tasks_dir))
    rows = [
        {
            "prompt": [
                {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                {"role": "user", "content": task.instruction},
            ],
            "task_id": task.id,
        }
        for task in tasks
    ]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.response_template = qwen3_template  # spreadrl's models write Hermes <tool_call>s
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=24,
        max_tool_calling_iterations=2,
        max_steps=2,
        beta=0.0,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    trainer = trl.GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype="float32"),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        environment_factory=Recorded,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "rewards/Recorded/mean" in h]
    assert len(logged) == 2
    assert len(scored) == 2 * 4
    by_id = {task.id: task for task in tasks}
    config = EnvConfig(tools=TOOLS)
    for task_id, calls, reward in scored:
        result, _ = replay(by_id[task_id], 1, calls, config=config)
        assert reward == result.reward, (task_id, calls)
    rewards = [r for _, _, r in scored]
    means = [sum(rewards[:4]) / 4, sum(rewards[4:]) / 4]
    assert [h["rewards/Recorded/mean"] for h in logged] == pytest.approx(means)


def test_the_factory_signature_is_what_trl_reads():
    """TRL lists an environment's tools as its class's public functions."""
    from spreadrl.integrations.trl_env import _tool_method

    method = _tool_method(
        {
            "function": {
                "name": "inspect_range",
                "description": "Read cells.",
                "parameters": {
                    "properties": {
                        "range": {"type": "string", "description": "A1 range"},
                        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                    },
                    "required": ["range"],
                },
            }
        }
    )
    params = inspect.signature(method).parameters
    assert list(params) == ["self", "range", "limit"]
    assert params["range"].annotation is str and params["limit"].annotation is int
    assert "range: A1 range" in method.__doc__

"""rollout.prompt_source=task: a task's own chat (Spreadsheet-RL's parquet prompt) opens the episode."""

from __future__ import annotations

from dataclasses import replace

from spreadrl.config import load_config
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from tests.rollout.fakes import FakePool, make_task

RELEASED = [
    {"role": "system", "content": "You are a spreadsheet agent working on data.xlsx."},
    {"role": "user", "content": "Put 42 in A1 of data.xlsx."},
]


class Answer:
    token_level = False

    def act_messages(self, states, params):
        return [PolicyTurn(text="done") for _ in states]


def _opening(task, source: str) -> list[dict]:
    settings = RolloutConfig(prompt_source=source, max_turns=1)
    batch = run_episodes(Answer(), FakePool(), [EpisodeJob(task)], settings)
    return batch.trajectories[0].messages[:2]


def test_the_task_chat_is_sent_verbatim_when_the_recipe_says_so():
    task = replace(make_task(), metadata={"prompt": RELEASED})
    assert _opening(task, "task") == RELEASED
    # the recipe's own prompt otherwise: its system prompt, then the instruction + overview
    recipe = _opening(task, "recipe")
    assert recipe[0] == {"role": "system", "content": RolloutConfig().system_prompt}
    assert (
        recipe[1]["content"].startswith("Put 42 in A1.") and "Sheet1: A1:B2" in recipe[1]["content"]
    )


def test_a_task_without_a_chat_falls_back_to_the_recipe_prompt():
    assert _opening(make_task(), "task") == _opening(make_task(), "recipe")


def test_the_key_is_read_from_the_recipe(tmp_path):
    assert RolloutConfig().prompt_source == "recipe"
    path = tmp_path / "r.yaml"
    path.write_text("prompt_source: task\n")
    cfg = load_config(RolloutConfig, path)
    assert cfg.prompt_source == "task"

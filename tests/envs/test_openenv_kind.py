"""env.kind openenv: the rollout loop and `spreadrl grpo` on an OpenEnv server.

Against `spreadrl env serve` the same tasks give the same rewards (and the same
conversations) as the in-process gym; against the echo environment that
openenv's `openenv init` writes (the environment openenv ships, as a template;
offline, unmodified: one session at a time), the action schema becomes the one
tool, the server's reset text the prompt and its reward the outcome, and GRPO
trains on it through a one-session cap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from spreadrl.config import load_config
from spreadrl.data.task import load_tasks
from spreadrl.env.config import EnvConfig
from spreadrl.env.factory import make_env_pool
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import NoopPolicy, OraclePolicy, format_tool_call
from spreadrl.rollout.episode import EpisodeJob
from spreadrl.rollout.runner import run_episodes
from spreadrl.rollout.types import PolicyTurn
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.envs.conftest import TOOLS
from tests.spawn import free_port, serving

pytestmark = pytest.mark.envs


def _episodes(pool, tasks, policy):
    jobs = [EpisodeJob(task, 1, 0) for task in tasks]
    return run_episodes(policy, pool, jobs, RolloutConfig()).trajectories


def test_oracle_and_noop_rewards_match_the_in_process_gym(openenv_url, tasks_dir):
    tasks = list(load_tasks(tasks_dir))
    gym = EnvConfig(tools=TOOLS)
    remote = EnvConfig(kind="openenv", url=openenv_url)
    for policy, expected in ((OraclePolicy(), 1.0), (NoopPolicy(), 0.0)):
        with make_env_pool(gym) as pool:
            local = _episodes(pool, tasks, policy)
        with make_env_pool(remote) as pool:
            served = _episodes(pool, tasks, policy)
        assert [t.reward for t in served] == [expected] * len(tasks)
        assert [t.reward for t in served] == [t.reward for t in local]
        assert [t.messages for t in served] == [t.messages for t in local]
        assert [t.tools for t in served] == [t.tools for t in local]
        assert all(t.error is None for t in served)


def _grpo_cfg(model_dir: Path, out: Path, env: list[str]) -> GRPOConfig:
    return load_config(
        GRPOConfig,
        None,
        [
            f"model.name_or_path={model_dir}",
            f"output_dir={out}",
            "steps=2",
            "device=cpu",
            "seed=7",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens_per_turn=16",
            "rollout.max_response_tokens=48",
            "reward.overlong=true",
            "reward.overlong_buffer=40",
            "sampling.mode=keep",
            "optim.lr=1e-3",
            *env,
        ],
    )


def _assert_weights_moved(start: Path, run: Path) -> None:
    from safetensors.torch import load_file

    before = load_file(str(start / "model.safetensors"))
    after = load_file(str(run / "final" / "model.safetensors"))
    moved = [name for name in before if not torch.equal(before[name], after[name])]
    assert moved, "no weight changed in two GRPO steps"


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_grpo_on_the_openenv_server_matches_the_gym_on_the_same_seed(
    openenv_url, tasks_dir, tiny_model_dir, tmp_path
):
    data = f"data.train_tasks={tasks_dir}"
    gym = ["env.tools=[write_range,inspect_range]", data]
    remote = ["env.kind=openenv", f"env.url={openenv_url}", data]
    train_grpo(_grpo_cfg(tiny_model_dir, tmp_path / "gym", gym))
    train_grpo(_grpo_cfg(tiny_model_dir, tmp_path / "openenv", remote))
    for run in ("gym", "openenv"):
        trajectories = (tmp_path / run / "trajectories.jsonl").read_text().splitlines()
        errors = [json.loads(line)["error"] for line in trajectories]
        assert errors == [None] * len(errors), (run, errors)
    local, served = _metrics(tmp_path / "gym"), _metrics(tmp_path / "openenv")
    assert [m["step"] for m in served] == [1, 2]
    for a, b in zip(local, served, strict=True):
        for key in ("reward_mean", "response_tokens", "loss", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key


@contextmanager
def echo_server(tmp: Path) -> Iterator[str]:
    """openenv's own example: the echo environment `openenv init` writes, unmodified
    (its app allows one concurrent session)."""
    openenv_cli = Path(sys.executable).with_name("openenv")
    subprocess.run(
        [str(openenv_cli), "init", "echo_env", "--output-dir", str(tmp)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "server.app:app", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(tmp / "echo_env")}
    log = tmp / f"echo-env-{port}.log"
    with serving(command, port, log=log, cwd=tmp / "echo_env", env=env, timeout_s=60) as url:
        yield url


class EchoOnce:
    """Calls the one tool with a message, then answers."""

    token_level = False

    def act_messages(self, states, params):
        return [
            PolicyTurn(text=format_tool_call("step", {"message": "hello"}))
            if state.turns_taken == 0
            else PolicyTurn(text="Done, bye.")
            for state in states
        ]


def test_a_server_from_outside_the_project_the_openenv_echo_environment(tmp_path, tasks_dir):
    tasks = load_tasks(tasks_dir).tasks[:3]
    with (
        echo_server(tmp_path) as url,
        make_env_pool(
            EnvConfig(kind="openenv", url=url, max_sessions=1, system_prompt="Echo things.")
        ) as pool,
    ):
        jobs = [EpisodeJob(task) for task in tasks]  # three episodes, one session at a time
        trajectories = run_episodes(EchoOnce(), pool, jobs, RolloutConfig()).trajectories
    assert [t.error for t in trajectories] == [None] * 3
    traj = trajectories[0]
    (tool,) = traj.tools
    assert tool["function"]["name"] == "step"
    assert "message" in tool["function"]["parameters"]["properties"]
    # the environment's own prompt: its reset text, and the system prompt set for it
    assert traj.messages[0] == {"role": "system", "content": "Echo things."}
    assert traj.messages[1]["content"] == "Echo Env environment ready!"
    echoed = json.loads(next(m for m in traj.messages if m["role"] == "tool")["content"])
    assert echoed["echoed_message"] == "hello" and echoed["message_length"] == 5
    # the final answer goes to the echo server as its action's one text field: 10
    # characters, reward 1.0 (the echo reward is 0.1 a character, at most 1.0; the call's
    # "hello" earned 0.5)
    assert [t.reward for t in trajectories] == [pytest.approx(1.0)] * 3


def test_grpo_trains_two_steps_on_the_unmodified_echo_environment(
    tmp_path, tasks_dir, tiny_model_dir
):
    """Four episodes a step against a server that holds one session: env.max_sessions=1
    runs them one after another, and none crashes. The untrained model writes no valid
    call; its final answer goes to the echo server as the message, whose reward (0.1 a
    character, at most 1.0) is the outcome. With 3-token turns and no overlong shaping,
    that reward is all GRPO has, so the weights move on the environment's reward."""
    out = tmp_path / "run"
    with echo_server(tmp_path) as url:
        env = ["env.kind=openenv", f"env.url={url}", "env.max_sessions=1"]
        env += [
            "env.system_prompt=Call the step tool with a message.",
            f"data.train_tasks={tasks_dir}",
        ]
        env += ["rollout.max_new_tokens_per_turn=3", "reward.overlong=false"]
        train_grpo(_grpo_cfg(tiny_model_dir, out, env))
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4
    assert [r["error"] for r in rows] == [None] * len(rows)
    assert all(r["messages"][1]["content"] == "Echo Env environment ready!" for r in rows)
    rewards = [r["reward"] for r in rows]
    assert len(set(rewards)) > 1, rewards  # the echo reward varies with what the model sent
    assert [m["step"] for m in _metrics(out)] == [1, 2]
    _assert_weights_moved(tiny_model_dir, out)


@contextmanager
def length_server(tmp: Path) -> Iterator[str]:
    """tests/envs/length_env.py on openenv's own server code (create_app, uvicorn)."""
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "uvicorn", "tests.envs.length_env:app", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(root)}
    log = tmp / f"length-env-{port}.log"
    with serving(command, port, log=log, cwd=root, env=env, timeout_s=60) as url:
        yield url


def test_grpo_trains_two_steps_on_a_foreign_environment_without_a_task_set(
    tmp_path, tiny_model_dir
):
    """A non-spreadsheet environment with a real reward (tests/envs/length_env.py: 1.0
    for a reply of exactly the asked length, less the further off) brings its own
    prompts: no spreadrl task set (data.train_tasks=openenv:4, episode i reset with seed
    i), the task text from its reset observation, the system prompt from
    env.system_prompt. Its action is one text field, so the model's final answer is the
    action, and GRPO trains on the reward the server gives it, graded as it is (not cut
    to 1 or 0 as the checker's pass). Two steps: no episode crashes, the rewards vary,
    the weights move."""
    out = tmp_path / "run"
    with length_server(tmp_path) as url:
        env = ["env.kind=openenv", f"env.url={url}", "data.train_tasks=openenv:4"]
        env += ["env.system_prompt=Answer in plain text."]
        env += ["rollout.max_new_tokens_per_turn=3", "reward.overlong=false"]
        train_grpo(_grpo_cfg(tiny_model_dir, out, env))
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4
    assert [r["error"] for r in rows] == [None] * len(rows)
    prompts = {r["messages"][1]["content"] for r in rows}
    assert all(p.startswith("Reply with a message of exactly ") for p in prompts), prompts
    assert all(r["messages"][0]["content"] == "Answer in plain text." for r in rows)
    rewards = [r["reward"] for r in rows]
    assert rewards == [r["env_reward"] for r in rows]  # the server's reward, as it grades
    assert len(set(rewards)) > 1 and any(0.0 < r < 1.0 for r in rewards), rewards
    assert [m["step"] for m in _metrics(out)] == [1, 2]
    _assert_weights_moved(tiny_model_dir, out)

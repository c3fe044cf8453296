"""rollout.harness_mcp: a harness gets the gym's tools over MCP, on its episode's workbook.

The endpoint serves them at ``/s/<key>/mcp`` beside the episode's ``/s/<key>/v1``,
through the same relay into the sandbox; the harnesses here (tests/envs/mcp_harness.py,
examples/harness/mcp_agent.py) connect with fastmcp's client. Without the mount every
episode here is an error (the client cannot connect).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from spreadrl.config import load_config
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.episodes import HarnessEpisodes
from spreadrl.rollout.harness.program import HarnessProgram
from spreadrl.rollout.runner import EpisodeJob, RunValues
from spreadrl.train.config import GRPOConfig
from spreadrl.train.grpo import train_grpo
from tests.rollout.harness.scripted import ScriptedTokenPolicy
from tests.rollout.harness.test_harness_episodes import workbook_task
from tests.train.test_grpo_smoke import RECIPE, _two_tasks

pytestmark = pytest.mark.envs

HARNESS = Path(__file__).with_name("mcp_harness.py")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "harness" / "mcp_agent.py"
TOOLS = "write_range,inspect_range"


@pytest.fixture()
def chat(tiny_model):
    return EpisodeChat.of(tiny_model[1])


def _play(tmp_path, chat, spec, tools, *, fork=True, episodes=2):
    env = EnvConfig(tools=tools)
    runner = HarnessEpisodes(
        HarnessProgram.parse(spec), env, workdir_root=str(tmp_path / "episodes")
    )
    jobs = [EpisodeJob(workbook_task(tmp_path), 1, s) for s in range(episodes)]
    cfg = RolloutConfig(max_turns=4, harness=spec, harness_mcp=True, harness_fork=fork)
    policy = ScriptedTokenPolicy(chat.tokenizer, chat.fmt.stop_ids[0])
    try:
        out = runner(policy, None, jobs, cfg, chat, run=RunValues(seed=1))
    finally:
        runner.close()
    for traj in out.trajectories:
        assert traj.error is None, (traj.error, traj.traceback)
    return out.trajectories, env


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "sandbox-per-episode"])
def test_a_harness_writes_the_answer_with_the_gyms_tools(tmp_path, chat, fork):
    """The harness lists the recipe's tools, sends them to the model, makes one failing
    call and writes the answer: the checker passes the workbook it left, and the
    trajectory counts the gym's calls and errors."""
    trajs, env = _play(tmp_path, chat, f"{HARNESS}:write_answer", TOOLS, fork=fork)
    gym_schemas = {s["function"]["name"]: s["function"] for s in SpreadsheetEnv(env).schemas}
    for traj in trajs:
        assert traj.passed and traj.reward == 1.0
        assert (traj.tool_calls, traj.tool_errors) == (2, 1)  # the MCP calls, as the gym counts
        assert traj.metadata["harness_model_tool_calls"] == 1  # the one the model wrote
        listed = {t["function"]["name"]: t["function"] for t in traj.tools}
        assert listed.keys() == gym_schemas.keys()
        for name, function in listed.items():  # the built-in loop's schemas, unchanged
            assert function["parameters"] == gym_schemas[name]["parameters"], name
            assert function["description"] == gym_schemas[name]["description"], name


def test_a_path_outside_the_episode_folder_is_a_tool_error(tmp_path, chat):
    """spreadrl-rl's tools take a workbook path: one outside the gym's folder (relative,
    absolute, the harness's own file beside it) is refused, and nothing is written there."""
    trajs, _ = _play(tmp_path, chat, f"{HARNESS}:outside_paths", "spreadsheet-rl", episodes=1)
    (traj,) = trajs
    assert (traj.tool_calls, traj.tool_errors) == (3, 3)
    assert not list(tmp_path.rglob("escaped.xlsx"))
    assert not Path("/tmp/escaped.xlsx").exists()


@pytest.mark.parametrize("kind", ["function", "command"])
def test_the_example_agent_runs_the_models_call_over_mcp(tmp_path, chat, kind):
    """examples/harness/mcp_agent.py, as a function (mcp_url) and as a command
    (SPREADRL_MCP_URL): the scripted model writes 42 into A1 with write_range, the agent
    runs that call on the MCP server, and the workbook passes."""
    spec = f"{EXAMPLE}:run" if kind == "function" else f"{sys.executable} {EXAMPLE}"
    trajs, _ = _play(tmp_path, chat, spec, "write_range")
    for traj in trajs:
        assert traj.turns == 2  # the call, then the answer after its result
        assert (traj.tool_calls, traj.tool_errors) == (1, 0)
        assert traj.passed and traj.reward == 1.0


def test_a_grpo_step_with_the_gyms_tools_over_mcp(tiny_model_dir, tmp_path):
    """One GRPO step whose episodes use the gym's tools over MCP: the gym's call counts
    reach the step's metrics, and the run ends with its checkpoint."""
    tasks, _, _ = _two_tasks(tmp_path / "tasks")
    out = tmp_path / "run"
    cfg = load_config(
        GRPOConfig,
        RECIPE,
        [
            f"model.name_or_path={tiny_model_dir}",
            f"data.train_tasks={tasks}",
            f"output_dir={out}",
            "steps=1",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_new_tokens_per_turn=16",
            "rollout.max_response_tokens=48",
            f"rollout.harness={HARNESS}:write_answer",
            "rollout.harness_mcp=true",
            f"env.tools=[{TOOLS}]",
            "env.max_tool_calls=8",
            "sampling.mode=keep",
        ],
    )
    train_grpo(cfg)
    (metrics,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics["harness_errors"] == 0
    assert metrics["tool_calls"] == 2.0  # each episode's two MCP calls
    assert (out / "final" / "model.safetensors").is_file()

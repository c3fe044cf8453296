"""The taskset, its tasks and the Env that steps ``spreadrl env serve`` (see the package)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

HOW_TO_ACT = (
    "Act with exactly one JSON object per reply: a tool call "
    '{"name": "<tool>", "arguments": {...}}, or, when the task is done, '
    '{"answer": "<short final answer>"}.'
)


class SpreadsheetGymData(vf.TaskData):
    base_url: str
    task_id: str | None
    max_turns: int
    tool_reward_weight: float


class SpreadsheetGymConfig(vf.TasksetConfig):
    base_url: str = "http://127.0.0.1:8000"
    """The running `spreadrl env serve`."""
    task_ids: list[str] = []
    """Task ids of the served set, one task each; empty: `count` of the server's next tasks."""
    count: int = 1
    """Tasks when no `task_ids` are given."""
    max_turns: int = 20
    """Model turns per episode; the episode is scored when they run out."""
    tool_reward_weight: float = 0.0
    """Weight of the `tool_calls` reward (the share of tool calls the gym accepted)."""


class SpreadsheetGymTask(vf.Task[SpreadsheetGymData]):
    pass


class SpreadsheetGymEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


def parse_action(reply: str) -> dict[str, Any] | str:
    """The reply as an action object, or the error text the model gets back."""
    text = reply.strip()
    if text.startswith("```") and text.endswith("```"):
        text = "\n".join(text.splitlines()[1:-1]).strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return "no JSON object in the reply. " + HOW_TO_ACT
    try:
        action = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        return f"the reply is not valid JSON ({exc.msg}). {HOW_TO_ACT}"
    if not isinstance(action, dict) or not ("name" in action or "answer" in action):
        return "the JSON needs a 'name' (with 'arguments') or an 'answer'. " + HOW_TO_ACT
    return {k: action[k] for k in ("name", "arguments", "answer") if k in action}


def mcp_action(action: dict[str, Any]) -> dict[str, Any]:
    """The reply's action as the server's MCP call (``final_answer`` ends the episode)."""
    if "answer" in action:
        arguments: Any = {"answer": str(action["answer"])}
        return {"type": "call_tool", "tool_name": "final_answer", "arguments": arguments}
    return {"type": "call_tool", "tool_name": action["name"], "arguments": action.get("arguments")}


def opening(observation: dict[str, Any]) -> str:
    """The first user turn: the task, the workbook, the tools, how to act."""
    tools = json.dumps(observation.get("tool_schemas") or [], ensure_ascii=False)
    return (
        f"{observation.get('text', '')}\n\nTools (OpenAI function schemas):\n{tools}\n\n"
        + HOW_TO_ACT
    )


class SpreadsheetGymEnv(vf.Env[SpreadsheetGymEnvConfig]):
    async def run(self, task, agents):
        from openenv.core.generic_client import GenericEnvClient

        data: SpreadsheetGymData = task.data
        calls = ok = 0
        async with GenericEnvClient(base_url=data.base_url) as client:
            result = await client.reset(task_id=data.task_id)
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(opening(result.observation))
                for _ in range(data.max_turns):
                    if segment.terminated or result.done:
                        break
                    action = parse_action(segment.last_reply or "")
                    if isinstance(action, str):
                        reply = f"Error: {action}"
                    else:
                        result = await client.step(mcp_action(action))
                        if "name" in action:
                            calls += 1
                            ok += bool(result.observation.get("ok", True))
                        reply = str(result.observation.get("text", ""))
                    if result.done:
                        break
                    segment = await interaction.turn(reply)
            if not result.done:  # out of turns: score the workbook as it is
                result = await client.step(mcp_action({"answer": ""}))
        trace = interaction.trace
        trace.record_reward("checker", float(result.reward or 0.0))
        share = ok / calls if calls else 0.0
        trace.record_reward("tool_calls", share, weight=data.tool_reward_weight)


class SpreadsheetGymTaskset(vf.Taskset[SpreadsheetGymTask, SpreadsheetGymConfig]):
    def load(self) -> Iterator[SpreadsheetGymTask]:
        config = self.config
        ids: list[str | None] = list(config.task_ids) or [None] * config.count
        for task_id in ids:
            yield SpreadsheetGymTask(
                SpreadsheetGymData(
                    name=task_id or f"{config.base_url}#next",
                    prompt=None,
                    base_url=config.base_url,
                    task_id=task_id,
                    max_turns=config.max_turns,
                    tool_reward_weight=config.tool_reward_weight,
                ),
                config.task,
            )

"""The rollout's tool server: one spreadrl gym episode behind MCP, started by verifiers.

verifiers launches it for each rollout (``python -m spreadrl_spreadsheet_gym.toolset``,
the Toolset lifecycle of ``verifiers.v1.mcp``) and hands it the rollout's task, so
the gym runs in this process: no separately started server. Its MCP tools are the
gym's own, with the JSON schemas the gym generates, under their own names; the
harness gives them to the model as native tools. After each call the working copy
is saved where the rollout's state says (``SpreadsheetState.folder``), and the
task's ``checker`` reward scores that file once the rollout ends.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any, cast

import verifiers.v1 as vf
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, Tool

from spreadrl.data.task import Task, TaskCase
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.env.types import ToolCall

WORKBOOK = "workbook.xlsx"
"""The saved working copy's name in the rollout's folder."""


class SpreadsheetState(vf.State):
    """What the tool server and the task share for one rollout."""

    folder: str = ""
    """Where the tool server saves the working copy (chosen by the task's setup)."""
    tool_calls: int = 0
    tool_errors: int = 0
    ended: str = ""
    """Why the gym ended the episode (its tool-call budget spent, a refused workbook)."""
    scored_zero: bool = False
    """The gym ended it in a way it scores 0 (a refused workbook, a limit)."""


class SpreadsheetToolsetConfig(vf.ToolsetConfig):
    pass


def gym_settings(data: Any) -> EnvConfig:
    """The gym's settings for a task's data (its tools and tool-call budget)."""
    return EnvConfig(tools=data.tools, max_tool_calls=data.max_tool_calls)


def gym_task(data: Any) -> Task:
    """The spreadrl task of a rollout's data: its one case, from the files it names."""
    case = TaskCase(
        data.case,
        Path(data.input_path),
        Path(data.answer_path),
        Path(data.solution_path) if data.solution_path else None,
    )
    folder = Path(data.input_path).parent
    return Task(
        data.task_id, data.instruction, data.instruction_type, data.answer_position, (case,), folder
    )


class SpreadsheetToolset(vf.Toolset[SpreadsheetToolsetConfig, SpreadsheetState]):
    """The gym's tools over one episode (see the module docstring)."""

    TOOL_PREFIX = None  # the gym's own tool names, as spreadrl's models learned them

    def __init__(self, config: SpreadsheetToolsetConfig) -> None:
        super().__init__(config)
        self._env: SpreadsheetEnv | None = None
        self._lock = asyncio.Lock()

    async def setup_task(self, task: Any) -> None:
        """Start the rollout's episode on a private copy of its case's workbook."""
        env = SpreadsheetEnv(gym_settings(task))
        await asyncio.to_thread(env.reset, gym_task(task), task.case)
        self._env = env

    def register(self, mcp: MCPServer) -> None:
        # MCPServer's handlers call these public methods: the gym's schemas go out as they are
        server = cast(Any, mcp)
        server.list_tools = self.list_tools
        server.call_tool = self._with_state(self.call_tool)

    async def list_tools(self) -> list[Tool]:
        env = self._running()
        return [
            Tool(
                name=schema["function"]["name"],
                description=schema["function"].get("description") or None,
                input_schema=schema["function"].get("parameters") or {"type": "object"},
            )
            for schema in env.schemas
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult:
        async with self._lock:  # one call at a time on the episode's workbook
            text, ok = await asyncio.to_thread(self._step, name, arguments)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=not ok)

    def _step(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        env, state = self._running(), self.state
        result = env.step(ToolCall(name, arguments or {}))
        state.tool_calls, state.tool_errors = env.tool_calls, env.tool_errors
        if result.truncated or result.terminated:
            state.ended = str(env.stop_reason or "")
            state.scored_zero = bool(env.ended_because)
        if state.folder and env.ctx is not None:
            _save(env.ctx.book.save(), Path(state.folder) / WORKBOOK)
        return result.observation, result.ok

    def _running(self) -> SpreadsheetEnv:
        if self._env is None:
            raise RuntimeError("no episode: the tool server got no task")
        return self._env


def _save(path: Path, target: Path) -> None:
    """Copy the working copy to ``target`` atomically (the task reads it after the rollout)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    shutil.copyfile(path, partial)
    os.replace(partial, target)


if __name__ == "__main__":
    SpreadsheetToolset.run()

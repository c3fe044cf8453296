"""The Spreadsheet Gym as an OpenEnv MCP environment (``openenv``'s ``MCPEnvironment``).

One OpenEnv session is one spreadrl episode: ``reset(task_id=..., case=...)``
starts it on a private copy of the case's workbook (the next task of the set
when no id is given). The gym's tools are MCP tools with the gym's own JSON
schemas: an agent discovers them with ``ListToolsAction`` (``{"type":
"list_tools"}``) and calls one with ``CallToolAction`` (``{"type": "call_tool",
"tool_name": ..., "arguments": {...}}``); the same tools are served on ``/mcp``
to any MCP client. The tool :data:`ANSWER_TOOL` ends the episode and its
observation carries the checker's reward (``done``); a call that spends the
tool-call budget also ends it, scored, as spreadrl's own rollouts do.

Anything malformed (an unknown action type or key, a tool name that is not a
string, arguments that are not a JSON object, an unknown tool, bad argument
values) comes back as an error observation (``ok`` false) and the episode goes
on, as a bad tool call does in the gym. ``state.tool_calls`` and
``state.tool_errors`` count what the gym counts (the calls that reached a tool),
so they agree with the final result; actions refused before a tool are
``state.rejected_actions``.

Production mode (``spreadrl env serve --workbook book.xlsx``, :class:`UserWorkbook`)
serves the same tools over a user's own workbook instead of a task: every session,
on ``/mcp`` or over the WebSocket, reads and writes that one file (one call at a
time; the file is saved after each call that succeeds), and there is no reward
and no ``final_answer``.

The action shape of spreadrl 0.1 (``{"name", "arguments"}`` and ``{"answer"}``)
still works in this release and logs a deprecation line once per session; it
goes in the next one.

Episodes run on a spreadrl env pool shared by the server's sessions: with
``workers`` > 0 in worker processes (a crashing tool takes down its worker,
not the server), else in the session's own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import ConfigDict, Field

from spreadrl.data.jsontypes import scalar_or_str
from spreadrl.data.task import Task, TaskSet
from spreadrl.env.spreadsheet.mcp import UserWorkbook, gym_server
from spreadrl.env.types import EndReason, ToolCall
from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)

ANSWER_TOOL = "final_answer"
"""The MCP tool that ends the episode and scores the workbook (the reward comes with it)."""

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": ANSWER_TOOL,
        "description": "End the episode with your final answer; the workbook is then scored.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "A short final answer."}},
            "required": [],
        },
    },
}

DEPRECATED_SHAPE = (
    "the action shape {'name', 'arguments'} / {'answer'} is deprecated and goes in the next "
    "release: send {'type': 'call_tool', 'tool_name': ..., 'arguments': {...}} (the answer: "
    f"tool_name '{ANSWER_TOOL}')"
)


class SpreadsheetAction(Action):
    """An MCP action (``type`` ``list_tools``, or ``call_tool`` with ``tool_name`` and
    ``arguments``: an object or its JSON text), or spreadrl 0.1's deprecated shape
    (``name`` + ``arguments``, or ``answer``). Any other shape is accepted here and
    answered with an error observation, so a client never gets a validation error."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    type: Any = Field(default=None, description="'call_tool' or 'list_tools' (MCP, RFC 003).")
    tool_name: Any = Field(default=None, description="call_tool: the tool to call.")
    arguments: Any = Field(
        default=None, description="The tool's arguments: an object, or its JSON text."
    )
    name: Any = Field(default=None, description="Deprecated: the tool to call.")
    answer: Any = Field(default=None, description="Deprecated: the final answer.")


class SpreadsheetObservation(Observation):
    """The task at reset; the tool's response (``text``) after a step. ``reward`` is set
    when ``done``: the checker's 1.0 or 0.0."""

    text: str = Field(default="", description="Tool response, or the task text at reset.")
    ok: bool = Field(default=True, description="False when the action was rejected or failed.")
    instruction: str = Field(default="", description="The task (reset only).")
    workbook_overview: str = Field(default="", description="Sheets and first rows (reset only).")
    tool_schemas: list[dict[str, Any]] = Field(
        default_factory=list, description="OpenAI function schemas of the tools (reset only)."
    )
    info: dict[str, Any] = Field(default_factory=dict, description="Task id, case, tool, result.")


class SpreadsheetToolObservation(CallToolObservation):
    """A ``CallToolObservation`` (``result`` in MCP's CallToolResult shape) with the
    tool's response as ``text`` too; ``reward`` and ``done`` as for any step."""

    text: str = Field(default="", description="The tool's response.")
    ok: bool = Field(default=True, description="False when the call failed or was rejected.")
    info: dict[str, Any] = Field(default_factory=dict, description="Tool; at the end, the result.")


class SpreadsheetState(State):
    """Where the session's episode stands (counts as the gym's final result gives them)."""

    task_id: str | None = None
    case: int = 1
    turn: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    rejected_actions: int = 0
    end_reason: str | None = None
    reward: float | None = None


class TaskPicker:
    """The server's task set and its round-robin order for resets that name no task.

    Shared by every session (a lock guards the counter); ``seed`` picks
    ``episodes[seed % n]`` so a client can ask for the same episode again."""

    def __init__(self, tasks: TaskSet) -> None:
        self.tasks = tasks
        self.episodes = tasks.episodes()
        if not self.episodes:
            raise SpreadrlError("the task set has no episodes to serve")
        self._ids = {task.id: task for task in tasks}
        self._next = itertools.count()
        self._lock = threading.Lock()

    def pick(self, task_id: str | None, case: int | None, seed: int | None) -> tuple[Task, int]:
        """The episode to start; an unknown task id or case is a 404 with one line."""
        if task_id is not None:
            task = self._ids.get(str(task_id))
            if task is None:
                raise HTTPException(404, f"unknown task_id {task_id!r}: not in the served set")
            index = int(case or 1)
            if not any(c.index == index for c in task.cases):
                raise HTTPException(404, f"task {task_id!r} has no case {index}")
            return task, index
        if seed is not None:
            return self.episodes[seed % len(self.episodes)]
        with self._lock:
            index = next(self._next)
        return self.episodes[index % len(self.episodes)]


@dataclass(frozen=True)
class GymInfo:
    """What every session of the server shares: the tasks and the pool (simulation), or
    the user's workbook (production); the tool schemas."""

    picker: TaskPicker | None
    pool: Any
    schemas: tuple[dict[str, Any], ...]
    version: str
    readme: str | None = None
    workbook: UserWorkbook | None = None


def _arguments(raw: Any) -> dict[str, Any] | str:
    """The call's arguments as an object, or the error text a model can act on."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return "the arguments must be a JSON object"
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return "the arguments must be a JSON object"
    return value


def mcp_tool(schema: dict[str, Any]) -> Tool:
    """An OpenAI function schema as OpenEnv's MCP ``Tool`` (the schema unchanged)."""
    function = schema["function"]
    return Tool(
        name=function["name"],
        description=function.get("description") or "",
        input_schema=function.get("parameters") or {"type": "object", "properties": {}},
    )


class SpreadsheetEnvironment(MCPEnvironment):
    """One OpenEnv session over one spreadrl episode at a time (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session's episode has its own folder

    def __init__(self, gym: GymInfo) -> None:
        production = gym.workbook is not None
        schemas = gym.schemas if production else (*gym.schemas, ANSWER_SCHEMA)
        super().__init__(gym_server("spreadrl-spreadsheet", schemas, self._run_tool))
        self._mode = "production" if production else "simulation"
        self._gym = gym
        self._tools = [mcp_tool(s) for s in schemas]
        self._names = {t.name for t in self._tools}
        self._episode: str | None = None
        self._warned = False
        self._lock = threading.Lock()  # one step at a time, from whichever path it comes
        self._state = SpreadsheetState()

    @property
    def state(self) -> SpreadsheetState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="spreadrl-spreadsheet",
            description=(
                "spreadrl's Spreadsheet Gym: real .xlsx workbooks, MCP tools (read, write, "
                "recalculate, code), a reward from SpreadsheetBench-compatible checking."
            ),
            version=self._gym.version,
            readme_content=self._gym.readme,
            documentation_url="https://github.com/spreadrl/spreadrl/blob/main/docs/environments.md",
        )

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        case: int | None = None,
        **_: Any,
    ) -> SpreadsheetObservation:
        """Start an episode on ``task_id`` (case ``case``), else the set's next one; in
        production mode, the user's workbook as it stands."""
        if self._gym.workbook is not None:
            book = self._gym.workbook
            overview = book.overview()
            self._state = SpreadsheetState(episode_id=episode_id or uuid.uuid4().hex)
            return SpreadsheetObservation(
                text=overview,
                workbook_overview=overview,
                tool_schemas=list(self._gym.schemas),
                info={"workbook": book.path.name, "mode": "production"},
            )
        assert self._gym.picker is not None
        task, case_index = self._gym.picker.pick(task_id, case, seed)
        with self._lock:
            self._drop()
            self._episode = f"{episode_id or uuid.uuid4().hex}-{uuid.uuid4().hex[:8]}"
            obs = self._gym.pool.reset(self._episode, task, case_index).result()
            self._state = SpreadsheetState(
                episode_id=episode_id or self._episode, task_id=task.id, case=case_index
            )
        return SpreadsheetObservation(
            text=f"{obs.instruction}\n\n{obs.workbook_overview}".strip(),
            instruction=obs.instruction,
            workbook_overview=obs.workbook_overview,
            tool_schemas=obs.tool_schemas,
            info={"task_id": task.id, "case": case_index, **_public(obs.info)},
        )

    # ---- steps: every path (WebSocket, HTTP, /mcp) comes here ---------------------

    def step(self, action: Action, timeout_s: float | None = None, **_: Any) -> Observation:
        return self._step_impl(action)

    async def step_async(
        self, action: Action, timeout_s: float | None = None, **_: Any
    ) -> Observation:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self._step_impl, action))

    def _step_impl(self, action: Action, timeout_s: float | None = None, **_: Any) -> Observation:
        """Route an action of any shape: list the tools, call one, or an error observation."""
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=list(self._tools))
        if isinstance(action, CallToolAction):
            return self._call_tool(action.tool_name, action.arguments)
        if not isinstance(action, SpreadsheetAction):
            return self._reject(f"unsupported action {type(action).__name__}", None)
        extra = sorted((action.model_extra or {}).keys())
        if extra:
            return self._reject(f"unknown key(s) in the action: {', '.join(extra)}", None)
        if action.type == "list_tools":
            return ListToolsObservation(tools=list(self._tools))
        if action.type == "call_tool":
            if not isinstance(action.tool_name, str) or not action.tool_name:
                return self._reject("a call_tool action needs a 'tool_name' (a string)", None)
            return self._call_tool(action.tool_name, action.arguments)
        if action.type is not None:
            return self._reject(
                f"unknown action type {action.type!r}; use 'call_tool' or 'list_tools'", None
            )
        return self._deprecated_step(action)

    def _deprecated_step(self, action: SpreadsheetAction) -> Observation:
        if not self._warned:
            self._warned = True
            log.warning(DEPRECATED_SHAPE)
        if action.answer is not None:
            return self._old(self._call_tool(ANSWER_TOOL, {"answer": str(action.answer)}))
        if not isinstance(action.name, str) or not action.name:
            return self._old(
                self._reject(
                    "an action needs a tool 'name' (with 'arguments') or an 'answer'", None
                )
            )
        return self._old(self._call_tool(action.name, action.arguments))

    @staticmethod
    def _old(obs: SpreadsheetToolObservation) -> SpreadsheetObservation:
        """A tool observation in the deprecated shape's observation type."""
        return SpreadsheetObservation(
            text=obs.text, ok=obs.ok, done=obs.done, reward=obs.reward, info=obs.info
        )

    def _run_tool(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """A call from ``/mcp`` (the session's FastMCP server): its text, and whether it succeeded."""
        obs = self._call_tool(name, arguments)
        return obs.text, obs.ok

    def _call_tool(self, name: str, raw_arguments: Any) -> SpreadsheetToolObservation:
        arguments = _arguments(raw_arguments)
        if self._gym.workbook is not None:
            return self._production_call(name, arguments)
        with self._lock:
            if self._episode is None:
                if self._state.end_reason == EndReason.MAX_TOOL_CALLS:  # the gym's own words
                    message = "the episode's budget is spent (max_tool_calls); give your answer"
                else:
                    message = "no episode is running: reset first"
                return self._reject(message, name, done=True)
            self._state.step_count += 1
            self._state.turn += 1
            if name == ANSWER_TOOL:
                answer = arguments.get("answer") if isinstance(arguments, dict) else None
                return self._finish(None if answer is None else str(answer), name)
            if isinstance(arguments, str):
                return self._reject(arguments, name)
            result = self._gym.pool.step(self._episode, ToolCall(name, arguments)).result()
            self._state.tool_calls += 1
            self._state.tool_errors += 0 if result.ok else 1
            if result.truncated:  # the budget is spent: the episode ends here, scored
                return self._finish(None, name, last=result.observation, budget=True)
            return _tool_observation(name, result.observation, result.ok, {"tool": name})

    def _production_call(
        self, name: str, arguments: dict[str, Any] | str
    ) -> SpreadsheetToolObservation:
        """A tool call on the user's workbook: no episode, no budget, no reward."""
        assert self._gym.workbook is not None
        if isinstance(arguments, str):
            return self._reject(arguments, name)
        result = self._gym.workbook.call(name, arguments)
        with self._lock:
            self._state.step_count += 1
            self._state.tool_calls += 1
            self._state.tool_errors += 0 if result.ok else 1
        return _tool_observation(name, result.observation, result.ok, {"tool": name})

    def _reject(
        self, message: str, tool: str | None, *, done: bool = False
    ) -> SpreadsheetToolObservation:
        self._state.rejected_actions += 1
        obs = _tool_observation(tool or "", f"Error: {message}", False, {"tool": tool})
        obs.done = done
        return obs

    def _finish(
        self, answer: str | None, tool: str, last: str = "", budget: bool = False
    ) -> SpreadsheetToolObservation:
        episode, self._episode = self._episode, None
        result = self._gym.pool.finish(episode, final_answer=answer).result()
        end = EndReason.MAX_TOOL_CALLS if budget else result.stop_reason
        state = self._state
        state.end_reason, state.reward = str(end), result.reward
        state.tool_calls, state.tool_errors = result.tool_calls, result.tool_errors
        mismatches = [
            {"sheet": m.sheet, "cell": m.cell, "expected": scalar_or_str(m.expected),
             "actual": scalar_or_str(m.actual), "reason": m.reason}
            for m in result.mismatches[:50]
        ]  # fmt: skip
        info = {
            "tool": tool,
            "passed": result.passed,
            "end_reason": str(end),
            "tool_calls": result.tool_calls,
            "tool_errors": result.tool_errors,
            "rejected_actions": state.rejected_actions,
            "mismatches": mismatches,
        }
        obs = _tool_observation(tool, last or f"reward {result.reward:g}", True, info)
        obs.done, obs.reward = True, result.reward
        return obs

    def _drop(self) -> None:
        """End a running episode unscored (a new reset, or the session closing)."""
        episode, self._episode = self._episode, None
        if episode is not None:
            with contextlib.suppress(Exception):  # the episode is dropped either way
                self._gym.pool.finish(episode).result()

    def close(self) -> None:
        with self._lock:
            self._drop()
        super().close()


def _tool_observation(
    tool: str, text: str, ok: bool, info: dict[str, Any]
) -> SpreadsheetToolObservation:
    """A tool's response in MCP's CallToolResult shape (as fastmcp's client returns it)."""
    result = {
        "content": [{"type": "text", "text": text}],
        "structured_content": None,
        "meta": None,
        "data": text,
        "is_error": not ok,
    }
    return SpreadsheetToolObservation(tool_name=tool, result=result, text=text, ok=ok, info=info)


def _public(info: dict[str, Any]) -> dict[str, Any]:
    """The reset info a client may see: not the server's folder paths."""
    return {k: v for k, v in info.items() if k not in ("episode_dir",)}

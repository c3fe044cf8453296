"""The Spreadsheet Gym as an OpenEnv ``Environment`` (openenv-core's types and server).

One OpenEnv session is one spreadrl episode: ``reset(task_id=..., case=...)``
starts it on a private copy of the case's workbook (the next task of the set
when no id is given), ``step(SpreadsheetAction)`` runs one tool call of the
chosen preset and returns the tool's response, and the action with ``answer``
set ends the episode and returns the checker's reward. A call that spends the
tool-call budget also ends it, scored, as spreadrl's own rollouts do. A
malformed action (unknown tool, arguments that are not a JSON object, bad
argument values) comes back as an error observation and the episode goes on,
as a bad tool call does in the gym.

Episodes run on a spreadrl env pool shared by the server's sessions: with
``workers`` > 0 in worker processes (a crashing tool takes down its worker,
not the server), else in the session's own thread.

openenv-core 0.3.0 leaves an observation's ``metadata`` out of what it sends
(``serialize_observation``), so what a client needs (task id, case, tool, end
reason) is in ``info``, a field of the observation.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import uuid
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from spreadrl.data.task import Task, TaskSet
from spreadrl.env.types import EndReason, ToolCall
from spreadrl.errors import SpreadrlError


class SpreadsheetAction(Action):
    """One tool call (``name`` + ``arguments``, OpenAI's function-call shape: the
    arguments an object or its JSON text), or the final ``answer`` that ends the episode."""

    name: str | None = Field(default=None, description="Tool to call (one of the preset's).")
    arguments: dict[str, Any] | str | None = Field(
        default=None, description="The tool's arguments: an object, or its JSON text."
    )
    answer: str | None = Field(
        default=None, description="Final answer: ends the episode and scores the workbook."
    )


class SpreadsheetObservation(Observation):
    """The tool's response (``text``); at reset the task, the workbook overview and the
    tool schemas. ``reward`` is set when ``done``: the checker's 1.0 or 0.0."""

    text: str = Field(default="", description="Tool response, or the task text at reset.")
    ok: bool = Field(default=True, description="False when the action was rejected or failed.")
    instruction: str = Field(default="", description="The task (reset only).")
    workbook_overview: str = Field(default="", description="Sheets and first rows (reset only).")
    tool_schemas: list[dict[str, Any]] = Field(
        default_factory=list, description="OpenAI function schemas of the tools (reset only)."
    )
    info: dict[str, Any] = Field(default_factory=dict, description="Task id, case, tool, result.")


class SpreadsheetState(State):
    """Where the session's episode stands."""

    task_id: str | None = None
    case: int = 1
    turn: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
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
        self._next = itertools.count()
        self._lock = threading.Lock()

    def pick(self, task_id: str | None, case: int | None, seed: int | None) -> tuple[Task, int]:
        if task_id is not None:
            task = self.tasks.get(task_id)
            return task, int(case or 1)
        if seed is not None:
            return self.episodes[seed % len(self.episodes)]
        with self._lock:
            index = next(self._next)
        return self.episodes[index % len(self.episodes)]


def _arguments(raw: dict[str, Any] | str | None) -> dict[str, Any] | str:
    """The call's arguments as an object, or the error text a model can act on."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        return f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return "the arguments must be a JSON object"
    return value


class SpreadsheetEnvironment(
    Environment[SpreadsheetAction, SpreadsheetObservation, SpreadsheetState]
):
    """One OpenEnv session over one spreadrl episode at a time (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session's episode has its own folder

    def __init__(self, picker: TaskPicker, pool: Any) -> None:
        super().__init__()
        self._picker = picker
        self._pool = pool
        self._episode: str | None = None
        self._state = SpreadsheetState()

    @property
    def state(self) -> SpreadsheetState:
        return self._state

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        case: int | None = None,
        **_: Any,
    ) -> SpreadsheetObservation:
        """Start an episode on ``task_id`` (case ``case``), else the set's next one."""
        self._drop()
        task, case_index = self._picker.pick(task_id, case, seed)
        self._episode = f"{episode_id or uuid.uuid4().hex}-{uuid.uuid4().hex[:8]}"
        obs = self._pool.reset(self._episode, task, case_index).result()
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

    def step(
        self, action: SpreadsheetAction, timeout_s: float | None = None, **_: Any
    ) -> SpreadsheetObservation:
        """Run the tool call, or end and score the episode on ``answer``."""
        if self._episode is None:
            if self._state.end_reason == EndReason.MAX_TOOL_CALLS:  # the gym's own words
                return self._error(
                    "the episode's budget is spent (max_tool_calls); give your final answer",
                    done=True,
                )
            return self._error("no episode is running: reset first", done=True)
        self._state.step_count += 1
        self._state.turn += 1
        if action.answer is not None:
            return self._finish(action.answer)
        if not action.name:
            return self._error("an action needs a tool 'name' (with 'arguments') or an 'answer'")
        arguments = _arguments(action.arguments)
        if isinstance(arguments, str):
            return self._error(arguments, tool=action.name)
        result = self._pool.step(self._episode, ToolCall(action.name, arguments)).result()
        self._state.tool_calls += 1
        if not result.ok:
            self._state.tool_errors += 1
        if result.truncated:  # the budget is spent: the episode ends here, scored
            return self._finish(None, last=result.observation, reason=EndReason.MAX_TOOL_CALLS)
        return SpreadsheetObservation(
            text=result.observation, ok=result.ok, info={"tool": action.name}
        )

    def _error(
        self, message: str, *, tool: str | None = None, done: bool = False
    ) -> SpreadsheetObservation:
        self._state.tool_errors += 1
        return SpreadsheetObservation(
            text=f"Error: {message}", ok=False, done=done, info={"tool": tool}
        )

    def _finish(
        self, answer: str | None, last: str = "", reason: EndReason | None = None
    ) -> SpreadsheetObservation:
        episode, self._episode = self._episode, None
        result = self._pool.finish(episode, final_answer=answer).result()
        end = reason or result.stop_reason
        self._state.end_reason = str(end)
        self._state.reward = result.reward
        mismatches = [
            {"sheet": m.sheet, "cell": m.cell, "expected": _plain(m.expected),
             "actual": _plain(m.actual), "reason": m.reason}
            for m in result.mismatches[:50]
        ]  # fmt: skip
        return SpreadsheetObservation(
            text=last or f"reward {result.reward:g}",
            done=True,
            reward=result.reward,
            info={
                "passed": result.passed,
                "end_reason": str(end),
                "tool_calls": result.tool_calls,
                "tool_errors": result.tool_errors,
                "mismatches": mismatches,
            },
        )

    def _drop(self) -> None:
        """End a running episode unscored (a new reset, or the session closing)."""
        episode, self._episode = self._episode, None
        if episode is not None:
            with contextlib.suppress(Exception):  # the episode is dropped either way
                self._pool.finish(episode).result()

    def close(self) -> None:
        self._drop()


def _public(info: dict[str, Any]) -> dict[str, Any]:
    """The reset info a client may see: not the server's folder paths."""
    return {k: v for k, v in info.items() if k not in ("episode_dir",)}


def _plain(value: object) -> str | int | float | bool | None:
    """A cell value as JSON carries it (dates and the like as text)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)

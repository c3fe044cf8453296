"""The environment contract and the records that cross it.

In Gymnasium's spirit, for text agents (:class:`Env`):
``env.reset(task, case) -> Observation``, ``env.step(ToolCall) -> StepResult``,
``env.finish(final_answer) -> EpisodeResult``, ``env.close()``. A step's
``truncated`` means a budget of the environment (its tool calls) is spent: the
episode should end. ``terminated`` means the environment itself ended the
episode: the gym does so only when a workbook is refused or a call runs over
the worker's limits (the step's ``info["end_reason"]`` says which); otherwise
the agent ends it by answering without a tool call. An :class:`EndReason` says
how each episode ended. :func:`spreadrl.env.check.check_env` checks an
environment against this contract.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from spreadrl.data.task import Task


class EndReason(StrEnum):
    """Why an episode ended. ``ANSWERED`` is the only one the agent chose itself
    (Gymnasium's ``terminated``); the budgets are ``truncated``; ``ERROR`` is a bug
    or a crashed worker: ``Trajectory.error`` says it in one line, ``Trajectory.traceback`` in full.

    A StrEnum: it compares equal to its value and is written to JSON as text.
    """

    ANSWERED = "answered"
    MAX_TURNS = "max_turns"
    MAX_RESPONSE_TOKENS = "max_response_tokens"
    MAX_CONTEXT_TOKENS = "max_context_tokens"
    MAX_TOOL_CALLS = "max_tool_calls"
    WALL_TIME = "wall_time"
    PROMPT_TOO_LONG = "prompt_too_long"
    ERROR = "error"
    ABORTED = "aborted"  # the generation engine aborted a turn (vLLM's "abort"/"error" finish)
    LOST_REQUEST = "lost_request"  # the engine no longer held a turn it was still generating

    NO_ANSWER = "no_answer"  # finished without a final answer (a driver called finish)
    # the environment ended the episode, scored 0: a workbook the archive gate refused
    # (spreadrl.archive_gate), or a tool call or grading over the worker's memory or
    # CPU-time limit (spreadrl.env.limits); the reason is in the step's observation and
    # the result's mismatches
    WORKBOOK_REFUSED = "workbook_refused"
    ENV_LIMIT = "env_limit"

    @property
    def terminated(self) -> bool:
        """The agent ended the episode itself (Gymnasium's ``terminated``)."""
        return self is EndReason.ANSWERED

    @property
    def truncated(self) -> bool:
        """A budget ended the episode (Gymnasium's ``truncated``)."""
        return self in _BUDGETS


_BUDGETS = frozenset(
    {
        EndReason.MAX_TURNS,
        EndReason.MAX_RESPONSE_TOKENS,
        EndReason.MAX_CONTEXT_TOKENS,
        EndReason.MAX_TOOL_CALLS,
        EndReason.WALL_TIME,
        EndReason.PROMPT_TOO_LONG,
    }
)


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model wrote it: a name and a JSON object of arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(name=str(data["name"]), arguments=dict(data.get("arguments") or {}))


@dataclass(frozen=True)
class Observation:
    """What the agent sees at the start: the task text and the tools it may call."""

    instruction: str
    workbook_overview: str
    tool_schemas: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one tool call. ``ok`` is False when the call was rejected or failed."""

    observation: str
    ok: bool
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Mismatch:
    """One answer cell that differs from the expected value."""

    sheet: str
    cell: str
    # a cell value (or, from the code env, an answer or test output), shown and written
    # to JSON as it is
    expected: object
    actual: object
    reason: str = ""


@dataclass(frozen=True)
class EpisodeResult:
    """The scored end of an episode: reward 1.0 iff every answer cell matches."""

    reward: float
    passed: bool
    mismatches: list[Mismatch]
    tool_calls: int
    tool_errors: int
    stop_reason: EndReason
    output_path: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """What an environment offers its driver (the agent loop, serve, ``env replay``).

    One episode at a time: ``reset`` starts one on a task case, ``step`` runs
    one tool call (bad calls come back as ``ok=False`` observations, never as
    exceptions), ``finish`` scores it and ends it, ``close`` frees what is left.
    """

    def reset(self, task: Task, case: int = 1) -> Observation: ...

    def step(self, call: ToolCall) -> StepResult: ...

    def finish(
        self, final_answer: str | None = None, output_path: str | None = None
    ) -> EpisodeResult: ...

    def close(self) -> None: ...

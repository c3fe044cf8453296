"""``env.kind: openenv``: the episodes of a run on an OpenEnv server, over openenv's own client.

:class:`OpenEnvPool` offers the env pool's interface (``reset`` / ``step`` /
``finish`` returning futures, see :mod:`spreadrl.env.pool`), so the rollout
loop, and with it ``spreadrl grpo`` and ``spreadrl eval``, runs unchanged
against any OpenEnv server: one WebSocket session (openenv's
``GenericEnvClient``) per episode, all driven from one event loop thread.

What the loop needs from the server:

- the tool schemas: an MCP environment (``spreadrl env serve``: its reset sends
  ``tool_schemas``) is asked for its tools (``list_tools``) and spoken to in
  MCP actions (``{"type": "call_tool", "tool_name", "arguments"}``; its
  ``final_answer`` tool ends and scores the episode); any other server gets one
  tool, ``step``, whose parameters are its action's JSON schema (``GET
  /schema``), and a call's arguments are the action;
- the observations: ``text`` when the server sends it, else the observation as
  JSON, become the tool responses; a ``done`` observation ends the episode;
- the reward: the server's, the last one it sent (the outcome, scored at
  ``finish``; 0.0 when it sent none). A foreign server whose action is one required
  text field gets the model's final answer as that action at ``finish``, and its
  reward for it (as verifiers' OpenEnv taskset sends a raw reply).

The task's id and case go to ``reset`` (``task_id``, ``case``; a server whose
``reset`` takes neither ignores them, as openenv drops keyword arguments a
``reset`` does not accept). A server that brings its own tasks needs no spreadrl
task set: ``openenv:<n>`` (``data.train_tasks``, ``--tasks``) is n episodes,
episode i reset with ``seed=i`` alone. The server's own prompt opens the episode: its
``instruction``, else its reset observation's text (``text``, ``prompt``,
``message``, ``echoed_message``, else the observation as JSON); the system prompt
is ``system_prompt`` when given, else the recipe's.

Sessions: ``max_sessions`` caps how many are open at once (the rollout loop runs
a batch in groups of that size, :func:`session_cap`), and a reset the server
refuses at capacity (a session of another client, or one still closing) is
retried with back-off until ``connect_timeout_s`` has passed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Coroutine, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import httpx

from spreadrl.data.sources import OPENENV_SOURCE
from spreadrl.data.task import Task
from spreadrl.env.types import EndReason, EpisodeResult, Mismatch, Observation, StepResult, ToolCall
from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)

GENERIC_TOOL = "step"
ANSWER_TOOL = "final_answer"  # spreadrl env serve's tool that ends and scores an episode
PROMPT_FIELDS = ("instruction", "text", "prompt", "message", "echoed_message")


@dataclass
class _Session:
    """One episode's WebSocket session and what it has seen."""

    client: Any
    lock: asyncio.Lock
    task: Task
    case: int
    native: bool  # an MCP environment: tools by list_tools, calls as call_tool
    reward: float | None = None
    done: bool = False
    calls: int = 0
    errors: int = 0
    info: dict[str, Any] = field(default_factory=dict)


class OpenEnvPool:
    """Episodes on the OpenEnv server at ``url``; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        max_sessions: int | None = None,
        system_prompt: str | None = None,
        message_timeout_s: float = 600.0,
        connect_timeout_s: float = 120.0,
    ) -> None:
        try:
            from openenv.core.generic_client import GenericEnvClient
        except ImportError as exc:
            raise SpreadrlError(
                "env.kind openenv needs openenv: pip install 'spreadrl[openenv]'"
            ) from exc
        self._client_cls = GenericEnvClient
        self.url = url.rstrip("/")
        self.max_sessions = max_sessions
        self.system_prompt = system_prompt
        self._timeout = message_timeout_s
        self._connect_timeout = connect_timeout_s
        self._sessions: dict[Hashable, _Session] = {}
        self._generic_schema: dict[str, Any] | None = None
        self._answer_field: str | None = None  # a foreign action's one required text field
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="spreadrl-openenv", daemon=True
        )
        self._thread.start()

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> Future:
        if self._closed:
            coro.close()
            raise SpreadrlError("the OpenEnv pool is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # ---- the pool interface -------------------------------------------------------

    def reset(self, episode_id: Hashable, task: Task, case: int = 1) -> Future[Observation]:
        return self._submit(self._reset(episode_id, task, case))

    def step(self, episode_id: Hashable, call: ToolCall) -> Future[StepResult]:
        return self._submit(self._step(episode_id, call))

    def finish(
        self, episode_id: Hashable, *, final_answer: str | None = None, **_: str | None
    ) -> Future[EpisodeResult]:
        """Score the episode (the server's reward) and close its session; the server
        keeps its workbooks, so ``output_path`` is not honoured."""
        return self._submit(self._finish(episode_id, final_answer))

    def map_steps(self, calls: list[tuple[Hashable, ToolCall]]) -> list[StepResult]:
        futures = [self.step(episode_id, call) for episode_id, call in calls]
        return [f.result() for f in futures]

    # ---- one episode --------------------------------------------------------------

    async def _reset(self, episode_id: Hashable, task: Task, case: int) -> Observation:
        if episode_id in self._sessions:
            raise SpreadrlError(f"episode {episode_id!r} is already running in this pool")
        client, result = await self._open(task, case)
        obs = dict(result.observation or {})
        native = bool(obs.get("tool_schemas"))
        session = _Session(client, asyncio.Lock(), task, case, native)
        self._sessions[episode_id] = session
        if native:
            schemas = await self._mcp_tools(session, obs["tool_schemas"])
            overview = str(obs.get("workbook_overview") or "")
            instruction = str(obs.get("instruction") or task.instruction)
        else:
            schemas = [await self._generic_tool()]
            instruction = _prompt(obs) or task.instruction
            overview = "" if _prompt(obs) else _render(obs)
        info = {**(obs.get("info") or {}), "openenv_url": self.url}
        if self.system_prompt is not None:
            info["system_prompt"] = self.system_prompt
        return Observation(
            instruction=instruction, workbook_overview=overview, tool_schemas=schemas, info=info
        )

    async def _open(self, task: Task, case: int) -> tuple[Any, Any]:
        """A connected session reset on the task; a server at capacity is retried with
        back-off (its sessions close as other episodes end)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connect_timeout
        delay = 0.05
        while True:
            client = self._client_cls(
                base_url=self.url,
                connect_timeout_s=self._connect_timeout,
                message_timeout_s=self._timeout,
            )
            try:
                await client.connect()
                return client, await client.reset(**reset_arguments(task, case))
            except Exception as exc:
                await client.close()
                if not _at_capacity(exc) or loop.time() + delay > deadline:
                    raise
            log.debug("OpenEnv server %s at capacity; retrying in %.2f s", self.url, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _mcp_tools(self, session: _Session, fallback: list[dict]) -> list[dict]:
        """The MCP environment's tools (list_tools) as OpenAI function schemas, less the
        one that ends the episode: spreadrl's loop ends it with the model's final message."""
        result = await session.client.step({"type": "list_tools"})
        tools = (result.observation or {}).get("tools")
        if not isinstance(tools, list) or not tools:
            return [s for s in fallback if s["function"]["name"] != ANSWER_TOOL]
        return [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t.get("description") or "",
                    "parameters": t.get("input_schema") or t.get("inputSchema") or {},
                },
            }
            for t in tools
            if t.get("name") != ANSWER_TOOL
        ]

    async def _step(self, episode_id: Hashable, call: ToolCall) -> StepResult:
        session = self._session(episode_id)
        async with session.lock:  # one message at a time on the session's socket, in order
            session.calls += 1
            if not session.native and call.name != GENERIC_TOOL:
                return self._rejected(session, f"unknown tool {call.name!r}; use {GENERIC_TOOL}")
            action = (
                {"type": "call_tool", "tool_name": call.name, "arguments": call.arguments}
                if session.native
                else dict(call.arguments)
            )
            try:
                result = await session.client.step(action)
            except RuntimeError as exc:  # the server refused the action (openenv's error reply)
                return self._rejected(session, str(exc))
            obs = dict(result.observation or {})
            ok = bool(obs.get("ok", True))
            session.errors += 0 if ok else 1
            if result.reward is not None:
                session.reward = float(result.reward)
            if result.done:
                session.done = True
                session.info = dict(obs.get("info") or {})
            text = str(obs["text"]) if session.native and "text" in obs else _render(obs)
            return StepResult(
                observation=text, ok=ok, truncated=result.done, info={"tool": call.name}
            )

    def _rejected(self, session: _Session, message: str) -> StepResult:
        session.errors += 1
        return StepResult(observation=f"Error: {message}", ok=False, info={})

    async def _finish(self, episode_id: Hashable, final_answer: str | None) -> EpisodeResult:
        session = self._session(episode_id)
        async with session.lock:
            del self._sessions[episode_id]
            try:
                if session.native and not session.done:
                    answer = {"answer": final_answer or ""}
                    call = {"type": "call_tool", "tool_name": ANSWER_TOOL, "arguments": answer}
                    result = await session.client.step(call)
                    session.reward = float(result.reward or 0.0)
                    session.info = dict((result.observation or {}).get("info") or {})
                elif not session.native and not session.done and final_answer is not None:
                    await self._answer_as_action(session, final_answer)
            finally:
                await session.client.close()
        return _episode_result(session, final_answer, self.url)

    async def _answer_as_action(self, session: _Session, final_answer: str) -> None:
        """A foreign environment whose action is one required text field (echo's
        ``message``, a word game's guess) gets the model's final answer as that action,
        and its reward for it, as verifiers' OpenEnv taskset sends a raw reply."""
        if self._answer_field is None:
            return
        try:
            result = await session.client.step({self._answer_field: final_answer})
        except RuntimeError as exc:  # the server refused it: the reward stays its last
            log.debug("OpenEnv server %s refused the final answer: %s", self.url, exc)
            return
        if result.reward is not None:
            session.reward = float(result.reward)
        session.done = bool(result.done)

    def _session(self, episode_id: Hashable) -> _Session:
        session = self._sessions.get(episode_id)
        if session is None:
            raise SpreadrlError(f"episode {episode_id!r} is not running in this pool; reset first")
        return session

    async def _generic_tool(self) -> dict[str, Any]:
        """The one tool of a server that names none: its action's JSON schema."""
        if self._generic_schema is None:
            async with httpx.AsyncClient(timeout=30) as http:
                reply = await http.get(f"{self.url}/schema")
                reply.raise_for_status()
            action = reply.json()["action"]
            self._generic_schema = generic_tool_schema(action)
            self._answer_field = answer_field(action)
        return self._generic_schema

    # ---- shutdown -----------------------------------------------------------------

    def close(self) -> None:
        """Close every open session and stop the event loop; safe to call twice."""
        if self._closed:
            return
        sessions = list(self._sessions.values())
        self._sessions.clear()

        async def close_all() -> None:
            await asyncio.gather(*(s.client.close() for s in sessions), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(timeout=30)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> OpenEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def generic_tool_schema(action: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function schema named ``step`` over an OpenEnv action's JSON schema."""
    props = {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": props,
        "required": [name for name in action.get("required") or [] if name in props],
    }
    if action.get("$defs"):
        parameters["$defs"] = action["$defs"]
    description = action.get("description") or "Send one action to the environment."
    return {
        "type": "function",
        "function": {"name": GENERIC_TOOL, "description": description, "parameters": parameters},
    }


def answer_field(action: dict[str, Any]) -> str | None:
    """The action's one required field when it is text (None otherwise)."""
    required = [name for name in action.get("required") or [] if name != "metadata"]
    props = action.get("properties") or {}
    if len(required) == 1 and (props.get(required[0]) or {}).get("type") == "string":
        return required[0]
    return None


def reset_arguments(task: Task, case: int) -> dict[str, Any]:
    """What ``reset`` gets: the task's id and case, or for an episode of the server's own
    tasks (``openenv:<n>``) its seed alone."""
    if task.source == OPENENV_SOURCE:
        return {"seed": int(task.metadata["seed"])}
    return {"task_id": task.id, "case": case}


def session_cap(pool: object) -> int | None:
    """How many episodes ``pool`` may run at once (an OpenEnv pool's ``max_sessions``);
    None: no cap."""
    return pool.max_sessions if isinstance(pool, OpenEnvPool) else None


def _at_capacity(exc: BaseException) -> bool:
    """Whether a failed connect or reset is the server refusing a session at capacity."""
    text = str(exc)
    return "CAPACITY_REACHED" in text or "capacity" in text.lower()


def _prompt(obs: dict[str, Any]) -> str:
    """A foreign environment's task text: the first text field its reset sends."""
    for name in PROMPT_FIELDS:
        value = obs.get(name)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _render(obs: dict[str, Any]) -> str:
    """An observation as a tool response: its fields as compact JSON."""
    return json.dumps(obs, ensure_ascii=False, default=str, sort_keys=True)


def _episode_result(session: _Session, final_answer: str | None, url: str) -> EpisodeResult:
    info = session.info
    reward = session.reward if session.reward is not None else 0.0
    try:
        reason = EndReason(info["end_reason"])
    except (KeyError, ValueError):
        reason = EndReason.ANSWERED if final_answer is not None else EndReason.NO_ANSWER
    mismatches = [
        Mismatch(
            m.get("sheet", ""),
            m.get("cell", ""),
            m.get("expected"),
            m.get("actual"),
            m.get("reason", ""),
        )
        for m in info.get("mismatches") or []
        if isinstance(m, dict)
    ]
    return EpisodeResult(
        reward=reward,
        passed=bool(info.get("passed", reward >= 1.0)),
        mismatches=mismatches,
        tool_calls=int(info.get("tool_calls", session.calls)),
        tool_errors=int(info.get("tool_errors", session.errors)),
        stop_reason=reason,
        info={"task_id": session.task.id, "case": session.case, "openenv_url": url},
    )

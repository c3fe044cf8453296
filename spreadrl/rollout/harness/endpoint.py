"""The capturing endpoint: the rollout policy served as an OpenAI-compatible chat endpoint.

During harness training each episode gets a session (a random key in its base
URL, ``/s/<key>/v1``); its harness calls ``/chat/completions`` there as it would
call any OpenAI-compatible server. The request is read, rendered and answered
with the wire format ``spreadrl serve`` uses (:mod:`spreadrl.rollout.openai_wire`);
what the engine saw and sampled is kept in the session's
:class:`~spreadrl.rollout.harness.capture.SessionCapture`.

Sampling is the recipe's (``rollout.temperature``, ``top_p``, ``top_k``, the turn and
episode token budgets): the log-probs the trainer compares against must be those of
the distribution it trains, so a request's own sampling fields are ignored. Each
call is seeded as the built-in loop seeds an episode's turn (the run's seed, the
episode id, the turn's index), so the same policy, seeds and prompts give the same
tokens through either path.

Concurrent calls of many episodes are batched into one ``policy.act`` call (the
hf engine generates a batch at once; vLLM's ``act`` takes a batch too): a batch
goes when every open session has a call waiting (the built-in loop's lockstep),
or when a gathering window after its first call has passed: half the last engine
call's time (at least :data:`GATHER_S`; :data:`GATHER_FIRST_S` before any), since a call that waits for the next batch
waits a whole engine call, and a harness busy with its own tools should not hold
the others back by more than that.

A session refuses calls past the episode's budget (``rollout.max_turns``, the
response tokens) with 429; a harness that keeps calling after
:data:`FLOOD_REFUSALS` refusals, or holds more than :data:`MAX_IN_FLIGHT` calls
at once, is flooding: its session's ``stop`` event is set and the episode runner
kills it (an episode error, never a zero-reward sample).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import secrets
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spreadrl.rollout.chat import EpisodeChat
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.harness.capture import SessionCapture
from spreadrl.rollout.harness.mcp import MCP_PATH
from spreadrl.rollout.openai_wire import (
    ChatCompletionRequest,
    parse_completion,
    to_template_messages,
)
from spreadrl.rollout.policy import TokenPolicy
from spreadrl.rollout.types import PolicyTurn, RunValues, derive_seed, sampling_params

log = logging.getLogger(__name__)

FLOOD_REFUSALS = 8
"""Refused calls a session may make before it counts as flooding the endpoint."""
MAX_IN_FLIGHT = 4
"""Calls one session may have waiting at once (a harness's loop makes one at a time)."""
GATHER_S = 0.02
"""The shortest a batch waits for more sessions' calls after its first one."""
GATHER_SHARE = 0.5
"""The gathering window as a share of the last engine call's time."""
GATHER_FIRST_S = 1.0
"""The gathering window before any engine call was timed (a rollout's first batch)."""


@dataclass
class Session:
    """One episode's connection to the endpoint."""

    key: str
    episode_id: str
    capture: SessionCapture
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: int = 0
    refused: int = 0
    in_flight: int = 0
    flooded: str | None = None  # why the session was stopped for flooding

    def refuse(self, why: str) -> None:
        """Count a refused call; past :data:`FLOOD_REFUSALS` the session is flooding."""
        self.refused += 1
        if self.refused > FLOOD_REFUSALS and self.flooded is None:
            self.flooded = f"the harness flooded the endpoint: {self.refused} calls refused ({why})"
            self.stop.set()


@dataclass
class _Request:
    context: list[int]
    budget: int
    seed: int | None
    done: Future[PolicyTurn]


class CaptureEndpoint:
    """Serve ``policy`` to harness sessions over HTTP, capturing every call's ids."""

    def __init__(
        self,
        policy: TokenPolicy,
        chat: EpisodeChat,
        cfg: RolloutConfig,
        run: RunValues,
        *,
        model_name: str = "spreadrl-policy",
    ) -> None:
        if not run.max_context_tokens:  # as run_episodes: no turn past the model's positions
            run = replace(run, max_context_tokens=max(policy.max_context_tokens, 0))
        self.policy, self.chat, self.cfg, self.run = policy, chat, cfg, run
        self.model_name = model_name
        self.sessions: dict[str, Session] = {}
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._server: Any = None
        self.port = 0
        self.generate_s = 0.0
        self.engine_calls = 0  # policy.act calls: how well concurrent requests batched
        self._last_act_s = 0.0

    # ---- lifecycle ----------------------------------------------------------------
    def start(self, app: Any) -> CaptureEndpoint:
        """Start the generation thread and serve ``app`` (the ASGI app of
        :func:`spreadrl.rollout.harness.app.build_app` over this endpoint) on a free
        loopback port."""
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        # the lifespan runs the MCP session manager when the gym's tools are served
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        serve = threading.Thread(
            target=lambda: asyncio.run(self._server.serve(sockets=[sock])),
            name="harness-endpoint",
            daemon=True,
        )
        gen = threading.Thread(target=self._generate_loop, name="harness-engine", daemon=True)
        self._threads = [serve, gen]
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def close(self) -> None:
        """Stop the server and the generation thread (calls still waiting fail). The
        server's thread is not waited for: uvicorn notices the flag on its next 0.1 s
        tick and every session is closed already, so waiting would only add that tick
        to each rollout."""
        if self._server is not None:
            self._server.should_exit = True
        self._queue.put(None)
        for thread in self._threads[1:]:  # the generation thread
            thread.join(timeout=30)
        self._threads = []

    # ---- sessions -------------------------------------------------------------------
    def open_session(self, episode_id: str) -> Session:
        """A new session for one episode; its base URL path is ``/s/<key>/v1``."""
        session = Session(secrets.token_hex(12), episode_id, SessionCapture(self.chat))
        with self._lock:
            self.sessions[session.key] = session
        return session

    def close_session(self, key: str) -> Session:
        with self._lock:
            return self.sessions.pop(key)

    def base_path(self, session: Session) -> str:
        return f"/s/{session.key}/v1"

    def mcp_path(self, session: Session) -> str:
        """Where the session's MCP server answers (``rollout.harness_mcp``)."""
        return f"/s/{session.key}{MCP_PATH}"

    # ---- one call -------------------------------------------------------------------
    def chat_call(self, session: Session, body: ChatCompletionRequest) -> dict[str, Any] | str:
        """Answer one request of ``session`` (blocking): the completion, or why it is refused."""
        cfg = self.cfg
        with session.lock:
            if session.stop.is_set():
                return "the episode is over"
            if session.calls >= cfg.max_turns:
                session.refuse("max_turns")
                return f"the episode's {cfg.max_turns} turns (rollout.max_turns) are spent"
            turn_index = session.calls
            session.calls += 1
        messages = to_template_messages(body)
        tools = [t.model_dump() for t in body.tools] if body.tools else None
        prompt, continued = session.capture.prompt_ids(messages, tools)
        room = session.capture.room(prompt, cfg.max_response_tokens)
        if self.run.max_context_tokens:
            room = min(room, self.run.max_context_tokens - len(prompt))
        if room <= 0:
            session.refuse("token budget")
            return "the episode's token budget (rollout.max_response_tokens) is spent"
        budget = max(1, min(cfg.max_new_tokens_per_turn, room))
        asked = body.max_completion_tokens or body.max_tokens
        if asked:
            budget = min(budget, asked)
        seed = derive_seed(self.run.seed, f"{session.episode_id}#{turn_index}")
        request = _Request(prompt, budget, seed, Future())
        self._queue.put(request)
        turn = request.done.result()
        done = parse_completion(self.chat, turn, len(prompt))
        reply: dict[str, Any] = {"role": "assistant", "content": done.content or ""}
        if done.reasoning is not None:
            reply["reasoning_content"] = done.reasoning
        if done.tool_calls:  # as to_template_messages gives an echoed call: arguments parsed
            reply["tool_calls"] = [
                {
                    "type": "function",
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in done.tool_calls
            ]
        session.capture.record(
            prompt,
            turn,
            messages=messages,
            tools=tools,
            reply=reply,
            tool_calls=len(done.tool_calls),
            continued=continued,
        )
        return {"completion": done, "prompt_ids": prompt, "turn": turn}

    # ---- generation -----------------------------------------------------------------
    def _generate_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            window = GATHER_SHARE * self._last_act_s if self._last_act_s else GATHER_FIRST_S
            deadline = time.monotonic() + max(GATHER_S, window)
            while len(batch) < self._waiting_sessions():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:  # in slices: a session that ends while we wait lowers the count
                    item = self._queue.get(timeout=min(left, GATHER_S))
                except queue.Empty:
                    continue
                if item is None:
                    self._fail(batch, RuntimeError("the endpoint closed"))
                    return
                batch.append(item)
            self._act(batch)

    def _waiting_sessions(self) -> int:
        with self._lock:
            return sum(1 for s in self.sessions.values() if not s.stop.is_set())

    def _act(self, batch: list[_Request]) -> None:
        # one call, one budget (the largest); each turn is clipped to its own after
        budget = max(r.budget for r in batch)
        params = sampling_params(self.cfg, seed=self.run.seed, max_new_tokens=budget)
        # each call's own seed, as the built-in loop seeds the turn (hf per row, vLLM per
        # request as its episode scheduler does): a call's tokens do not depend on its batch
        seeds = [r.seed for r in batch] if all(r.seed is not None for r in batch) else None
        t0 = time.perf_counter()
        try:
            turns = self.policy.act([r.context for r in batch], params, seeds=seeds)
        except Exception as exc:  # the engine failed: every waiting call fails with it
            self._fail(batch, exc)
            return
        self._last_act_s = time.perf_counter() - t0
        self.generate_s += self._last_act_s
        self.engine_calls += 1
        for request, turn in zip(batch, turns, strict=True):
            request.done.set_result(_clipped(turn, request.budget))

    @staticmethod
    def _fail(batch: list[_Request], exc: BaseException) -> None:
        for request in batch:
            request.done.set_exception(exc)


def _clipped(turn: PolicyTurn, room: int) -> PolicyTurn:
    if turn.token_ids is not None and len(turn.token_ids) > room:
        turn.token_ids = turn.token_ids[:room]
        turn.logprobs = (turn.logprobs or [])[:room]
        turn.finish_reason = "length"
    return turn


class UnixRelay:
    """A Unix socket in an episode's folder relayed to the endpoint's loopback port.

    Under bubblewrap a harness has no network at all (its own network namespace);
    the episode folder is the one place it shares with this process, so the
    endpoint reaches it as a socket there, and the harness's launcher relays a
    loopback port of its own namespace to it."""

    def __init__(self, path: Path, port: int) -> None:
        self.path, self.port = path, port
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # bound through the folder's descriptor: a socket path holds at most 107 bytes,
        # which a deep temporary folder can pass
        folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
        try:
            self._sock.bind(f"/proc/self/fd/{folder}/{path.name}")
        finally:
            os.close(folder)
        path.chmod(0o777)  # the sandbox's own uid connects to it
        self._sock.listen(64)
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True, name="harness-relay")
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self._sock.accept()
            except OSError:
                return
            try:
                outer = socket.create_connection(("127.0.0.1", self.port))
            except OSError:
                inner.close()
                continue
            self._open += [inner, outer]
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        for sock in [self._sock, *self._open]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thread.join(timeout=5)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

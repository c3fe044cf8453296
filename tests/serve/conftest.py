"""Fixtures for the server tests: the tiny model as a policy, apps, workbooks, a live uvicorn."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_policy(tiny_model):
    from spreadrl.rollout.engines.hf import HFPolicy

    model, tokenizer = tiny_model
    return HFPolicy(model, tokenizer), tokenizer


def make_settings(**overrides: Any):
    from spreadrl.serve.schemas import ServeSettings

    base = {"model_name": "tiny", "env_workers": 0, "default_max_tokens": 8, "timeout_s": 60.0}
    base.update(overrides)
    return ServeSettings(**base)


def xlsx_bytes(rows: list[list[Any]] | None = None, sheet: str = "Sheet1") -> bytes:
    """A small workbook built in code."""
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = sheet
    for row in rows or [["item", "qty"], ["a", 1], ["b", 2], ["c", 3]]:
        ws.append(row)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


class GatedPolicy:
    """Wraps a policy; every call waits until ``gate`` is set (to hold requests in flight).

    ``on_enter()``, if given, runs as each call enters, before it waits.
    """

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, policy: Any, on_enter: Callable[[], Any] | None = None) -> None:
        self.policy = policy
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.on_enter = on_enter
        self.calls = 0

    def act(self, contexts, params, *, seeds=None):
        self.calls += 1
        self.entered.set()
        if self.on_enter is not None:
            self.on_enter()
        if not self.gate.wait(timeout=30):
            raise RuntimeError("gate never opened")
        return self.policy.act(contexts, params, seeds=seeds)


class ManualDeadlines:
    """A server ``deadline`` that never expires on its own: ``fire()`` expires the pending ones.

    Requests admitted after a ``fire()`` get fresh deadlines that stay pending, so a
    504 happens exactly when a test asks for it, however slow the machine is.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.armed = 0

    def __call__(self, timeout_s: float) -> asyncio.Future[None]:
        # armed here, synchronously, when ``Admission.run`` asks for the deadline (before
        # the request is counted as waiting): a coroutine would only arm at the loop's next
        # turn, and a test that saw the queue grow could fire() before that turn came
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._pending.append((loop, future))
            self.armed += 1
        return future

    def fire(self) -> int:
        """Expire every deadline armed so far (callable from any thread); return how many."""
        with self._lock:
            pending, self._pending = self._pending, []
        for loop, future in pending:
            loop.call_soon_threadsafe(lambda f=future: f.done() or f.set_result(None))
        return len(pending)


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Run ``app`` under a real uvicorn on 127.0.0.1 (a free port) in a thread; yield its URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=20)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not shut down"


@pytest.fixture
def app_factory(tiny_policy, tmp_path) -> Callable[..., Any]:
    """``app_factory(policy=None, pool_factory=None, deadline=None, **settings)`` -> a FastAPI
    app on the tiny model."""
    from spreadrl.serve.app import create_app

    def build(
        policy: Any = None, pool_factory: Any = None, deadline: Any = None, **overrides: Any
    ) -> Any:
        base_policy, tokenizer = tiny_policy
        return create_app(
            make_settings(**overrides),
            policy or base_policy,
            tokenizer,
            pool_factory=pool_factory,
            work_dir=tmp_path / "served",
            deadline=deadline,
        )

    return build

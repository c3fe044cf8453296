"""Admission control, body-size limit and metrics: what keeps the server up under load.

Work runs in a thread pool, never on the event loop, so health checks and
metrics answer while a model generates. :class:`Admission` lets at most
``max_concurrency`` requests work at once and ``max_queue`` more wait; the
next one is refused at once with 503 rather than piling up. A request that
outlives its deadline gets 504; its thread is not killed (Python cannot), so
its slot is freed only when the thread really ends, which keeps the count of
busy threads honest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, TypeVarTuple

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spreadrl.rollout.policy import Contexts, Seeds, TokenPolicy
from spreadrl.rollout.types import PolicyTurn, SamplingParams

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Overloaded(Exception):
    """The queue is full: answer 503."""


class DeadlineExceeded(Exception):
    """The request ran past its timeout: answer 504."""


Deadline = Callable[[float], Awaitable[object]]
"""``deadline(timeout_s)``: an awaitable that completes when a request's time is up."""


class Admission:
    """A semaphore with a bounded wait queue and a per-request deadline.

    ``deadline`` is what decides that a request's time is up: by default
    ``asyncio.sleep`` on the server's event loop. Tests pass one that completes
    when they say so, so a 504 does not depend on how loaded the machine is.
    """

    def __init__(
        self, max_concurrency: int, max_queue: int, *, deadline: Deadline | None = None
    ) -> None:
        if max_concurrency < 1 or max_queue < 0:
            raise ValueError("max_concurrency must be >= 1 and max_queue >= 0")
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.executor = ThreadPoolExecutor(max_concurrency, thread_name_prefix="spreadrl-serve")
        self.deadline: Deadline = deadline or asyncio.sleep
        self._sem: asyncio.Semaphore | None = None
        self.running = 0
        self.waiting = 0

    def _semaphore(self) -> asyncio.Semaphore:
        if self._sem is None:  # created lazily, inside the server's event loop
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._sem

    async def run(self, timeout_s: float, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """Run ``fn(*args)`` in the pool once a slot is free; raise Overloaded or DeadlineExceeded.

        One deadline covers the wait for a slot and the work itself.
        """
        sem = self._semaphore()
        if self.running + self.waiting >= self.max_concurrency + self.max_queue:
            raise Overloaded
        expired = asyncio.ensure_future(self.deadline(max(0.0, timeout_s)))
        try:
            await self._acquire(sem, expired)
            return await self._work(sem, expired, fn, *args)
        finally:
            expired.cancel()

    async def _acquire(self, sem: asyncio.Semaphore, expired: asyncio.Future[object]) -> None:
        self.waiting += 1
        acquire = asyncio.ensure_future(sem.acquire())
        try:
            await asyncio.wait({acquire, expired}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the request itself was cancelled (client gone, shutdown)
            _give_up_slot(acquire, sem)
            raise
        finally:
            self.waiting -= 1
        if not acquire.done():
            _give_up_slot(acquire, sem)
            raise DeadlineExceeded

    async def _work(
        self,
        sem: asyncio.Semaphore,
        expired: asyncio.Future[object],
        fn: Callable[[*Ts], T],
        *args: *Ts,
    ) -> T:
        self.running += 1
        loop = asyncio.get_running_loop()

        def release(_: concurrent.futures.Future[T]) -> None:
            def done() -> None:
                self.running -= 1
                sem.release()

            with contextlib.suppress(RuntimeError):  # a closed loop: the server is gone
                loop.call_soon_threadsafe(done)

        try:
            cfuture = self.executor.submit(fn, *args)
        except BaseException:
            self.running -= 1
            sem.release()
            raise
        cfuture.add_done_callback(release)
        work = asyncio.wrap_future(cfuture)
        try:
            await asyncio.wait({work, expired}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.add_done_callback(_consume)
            raise
        if work.done():
            return work.result()
        # the thread goes on (Python cannot stop it); its slot is freed when it ends
        work.add_done_callback(_consume)
        raise DeadlineExceeded

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def _give_up_slot(acquire: asyncio.Future[bool], sem: asyncio.Semaphore) -> None:
    """Cancel a wait for a slot; if the slot was granted all the same, hand it back."""
    acquire.cancel()

    def settle(future: asyncio.Future[bool]) -> None:
        if not future.cancelled() and future.exception() is None:
            sem.release()

    acquire.add_done_callback(settle)


def _consume(future: asyncio.Future[T]) -> None:
    """Read an abandoned request's outcome so asyncio does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


class LockedPolicy:
    """A policy whose ``act`` runs one call at a time: one model, many request threads.

    It generates turn by turn (``act`` under the lock), so it does not stream, even
    around an engine that could; the rest of what the loop reads is the policy's."""

    token_level: Literal[True] = True
    streaming = False

    def __init__(self, policy: TokenPolicy, lock: threading.Lock) -> None:
        self._policy = policy
        self._lock = lock

    @property
    def seeds_per_context(self) -> bool:
        return self._policy.seeds_per_context

    @property
    def max_context_tokens(self) -> int:
        return self._policy.max_context_tokens

    def act(
        self, contexts: Contexts, params: SamplingParams, *, seeds: Seeds | None = None
    ) -> list[PolicyTurn]:
        with self._lock:
            return self._policy.act(contexts, params, seeds=seeds)

    def close(self) -> None:
        """Stop the policy's engine processes, if it has any (:func:`close_policy`)."""
        with self._lock:
            close_policy(self._policy)


def close_policy(policy: object) -> None:
    """Stop what ``policy`` runs beside this process (vLLM's engine processes), if it
    runs anything: a policy that does has ``close()``, safe to call twice (hf's has
    nothing to stop, and no ``close``)."""
    close = getattr(policy, "close", None)
    if close is not None:
        close()


@dataclass
class RouteStats:
    count: int = 0
    latency_sum_s: float = 0.0
    latency_max_s: float = 0.0
    by_status: dict[int, int] = field(default_factory=dict)


class Metrics:
    """Request counts and latencies per route; the gauges come from :class:`Admission`."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.started = time.time()
        self.routes: dict[str, RouteStats] = {}
        self.generated_tokens = 0
        self.prompt_tokens = 0
        self.http_in_flight = 0
        self._lock = threading.Lock()

    def record(self, route: str, status: int, latency_s: float) -> None:
        with self._lock:
            stats = self.routes.setdefault(route, RouteStats())
            stats.count += 1
            stats.latency_sum_s += latency_s
            stats.latency_max_s = max(stats.latency_max_s, latency_s)
            stats.by_status[status] = stats.by_status.get(status, 0) + 1

    def add_tokens(self, prompt: int, generated: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.generated_tokens += generated

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            routes = {
                name: {
                    "count": s.count,
                    "latency_mean_s": round(s.latency_sum_s / s.count, 6) if s.count else 0.0,
                    "latency_max_s": round(s.latency_max_s, 6),
                    "latency_sum_s": round(s.latency_sum_s, 6),
                    "by_status": {str(k): v for k, v in sorted(s.by_status.items())},
                }
                for name, s in sorted(self.routes.items())
            }
            return {
                "uptime_s": round(time.time() - self.started, 3),
                "requests_total": sum(s.count for s in self.routes.values()),
                "in_flight": self.admission.running,
                "queue_depth": self.admission.waiting,
                "http_in_flight": self.http_in_flight,
                "max_concurrency": self.admission.max_concurrency,
                "max_queue": self.admission.max_queue,
                "prompt_tokens_total": self.prompt_tokens,
                "generated_tokens_total": self.generated_tokens,
                "routes": routes,
            }

    def prometheus(self) -> str:
        """The same figures in Prometheus' text exposition format."""
        snap = self.snapshot()
        lines = [
            "# TYPE spreadrl_requests_total counter",
            "# TYPE spreadrl_request_latency_seconds summary",
        ]
        for route, r in snap["routes"].items():
            for status, n in r["by_status"].items():
                lines.append(f'spreadrl_requests_total{{route="{route}",status="{status}"}} {n}')
            lines.append(
                f'spreadrl_request_latency_seconds_sum{{route="{route}"}} {r["latency_sum_s"]}'
            )
            lines.append(f'spreadrl_request_latency_seconds_count{{route="{route}"}} {r["count"]}')
        gauges = {
            "spreadrl_in_flight": snap["in_flight"],
            "spreadrl_queue_depth": snap["queue_depth"],
            "spreadrl_http_in_flight": snap["http_in_flight"],
            "spreadrl_uptime_seconds": snap["uptime_s"],
        }
        for name, value in gauges.items():
            lines += [f"# TYPE {name} gauge", f"{name} {value}"]
        for name in ("prompt_tokens_total", "generated_tokens_total"):
            lines += [f"# TYPE spreadrl_{name} counter", f"spreadrl_{name} {snap[name]}"]
        return "\n".join(lines) + "\n"


class RequestMetrics:
    """ASGI middleware: count every request by route template and status, with its latency.

    Plain ASGI rather than ``@app.middleware("http")``: Starlette's
    BaseHTTPMiddleware runs the app in a task group, which would wrap the
    body-limit error in an ExceptionGroup and turn the 413 into a 400.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        self.metrics.http_in_flight += 1

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            self.metrics.http_in_flight -= 1
            route = getattr(scope.get("route"), "path", None) or "(unmatched)"
            self.metrics.record(
                f"{scope.get('method', '?')} {route}", status, time.perf_counter() - start
            )


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a body without Content-Length grows past the limit.

    An HTTPException, so FastAPI's body parsing lets it through (it wraps other
    errors into a 400) and the app's handler answers 413.
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, too_large_message(max_bytes))


def too_large_message(max_bytes: int) -> str:
    return f"request body is larger than the server's limit of {max_bytes} bytes"


class BodySizeLimit:
    """ASGI middleware: 413 for a body over ``max_bytes``, by header or by counting a chunked body."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        body = json.dumps(
            {
                "error": {
                    "message": too_large_message(self.max_bytes),
                    "type": "request_too_large",
                    "code": "body_too_large",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

"""Run many episodes' tool calls in worker processes so tool execution never blocks
generation.

Why processes: recalculation and workbook edits are CPU-bound Python (the GIL would
serialise threads), and a tool that takes its process down (``os._exit``, a segfault
in a C extension) must take down only the episodes that were on that worker, not the
trainer. Workers start with the "spawn" context because the parent has torch loaded.

Each episode is pinned to one worker at ``reset`` (the least loaded) and its env object
lives there until ``finish``. Every request returns a ``concurrent.futures.Future``
(``asyncio.wrap_future`` makes it awaitable). Back-pressure: at most ``max_pending``
requests are in flight per worker; a further submit blocks until one completes.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import threading
import traceback
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Future
from multiprocessing.connection import Connection, wait
from typing import Any

from spreadrl.data.task import Task
from spreadrl.env.limits import WorkerLimits
from spreadrl.env.types import Env, EpisodeResult, Observation, StepResult, ToolCall
from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)


class EpisodeCrashed(SpreadrlError):
    """The worker running this episode died; the episode is lost, others go on."""


class PoolClosed(SpreadrlError):
    """A request was made to a pool that has been closed."""


def _worker_main(
    env_factory: Callable[[], Any], conn: Connection, limits: WorkerLimits | None = None
) -> None:
    """Worker loop: one request at a time, envs keyed by episode id.

    The worker leaves the trainer's process group and ignores SIGINT and SIGTERM:
    Ctrl-C in a terminal (sent to the foreground group), the SIGINT / SIGTERM
    torchrun forwards to a worker's group and the SIGTERM a cluster scheduler
    sends to every process of a preempted job (Slurm's ``scancel``, by cgroup,
    not by group) are the trainer's to handle. It finishes the step under way,
    which needs these workers (killed, they would turn the step's episodes into
    errors that the saved step trains on), then closes the pool. A worker whose
    trainer died exits when the pipe closes (``EOFError`` below); the pool kills
    (SIGKILL) a worker that does not stop when closed.

    ``limits`` (:mod:`spreadrl.env.limits`): the worker's address space is capped
    here, and each request runs under a CPU-time budget and a watchdog.
    """
    if limits is not None:
        limits.apply_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    envs: dict[Hashable, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg is None:
            break
        req_id, op, episode_id, args, kwargs = msg
        try:
            with limits.request() if limits is not None else contextlib.nullcontext():
                value = _run(envs, env_factory, op, episode_id, args, kwargs)
            reply = (req_id, True, value)
        except BaseException as exc:  # sent back to the caller's future, never swallowed
            reply = (req_id, False, _portable_exception(exc))
        conn.send(reply)
    for env in envs.values():
        env.close()


def _run(
    envs: dict[Hashable, Any],
    env_factory: Callable[[], Any],
    op: str,
    episode_id: Hashable,
    args: tuple,
    kwargs: dict,
) -> Any:
    """One request of the worker loop: reset, step or finish an episode's env."""
    if op == "reset":
        if episode_id in envs:
            raise SpreadrlError(f"episode {episode_id!r} is already running")
        env = env_factory()
        envs[episode_id] = env
        return env.reset(*args, **kwargs)
    env = envs.get(episode_id)
    if env is None:
        raise SpreadrlError(f"episode {episode_id!r} was not reset on this pool")
    if op == "step":
        return env.step(*args, **kwargs)
    try:
        return env.finish(*args, **kwargs)
    finally:
        del envs[episode_id]
        env.close()


def _portable_exception(exc: BaseException) -> BaseException:
    """The exception itself if it pickles, else a RuntimeError carrying its traceback."""
    import pickle

    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__} in worker:\n{text}")
    exc.add_note(f"worker traceback:\n{text}")
    return exc


class _Worker:
    def __init__(
        self, ctx, env_factory, index: int, max_pending: int, limits: WorkerLimits | None
    ) -> None:
        self.index = index
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker_main,
            args=(env_factory, child, limits),
            name=f"spreadrl-env-worker-{index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.slots = threading.BoundedSemaphore(max_pending)
        self.send_lock = threading.Lock()
        self.pending: dict[int, tuple[Future, Hashable]] = {}
        self.episodes: set[Hashable] = set()


class EnvPool:
    """Episodes on ``num_workers`` processes; see the module docstring.

    ``env_factory`` is called in the worker once per episode and must pickle (a
    top-level callable or ``functools.partial``); the env it returns follows
    ``reset(task, case)``, ``step(call)``, ``finish(**kw)``, ``close()``.
    """

    def __init__(
        self,
        env_factory: Callable[[], Any],
        num_workers: int,
        max_pending: int | None = None,
        *,
        mp_context: str = "spawn",
        limits: WorkerLimits | None = None,
    ) -> None:
        if num_workers < 1:
            raise SpreadrlError(
                f"num_workers must be at least 1 (got {num_workers}); use InlineEnvPool for 0"
            )
        self._factory = env_factory
        self._limits = limits
        self._ctx = mp.get_context(mp_context)
        self._max_pending = max_pending or 4
        self._lock = threading.Lock()
        self._next_id = 0
        self._closed = False
        self._home: dict[Hashable, int] = {}
        self._crashed: dict[Hashable, str] = {}
        self._workers = [self._start(i) for i in range(num_workers)]
        self.restarts = 0
        self._collector = threading.Thread(
            target=self._collect, name="spreadrl-env-pool", daemon=True
        )
        self._collector.start()

    def _start(self, index: int) -> _Worker:
        return _Worker(self._ctx, self._factory, index, self._max_pending, self._limits)

    # ---- requests -----------------------------------------------------------------

    def reset(self, episode_id: Hashable, task: Task, case: int = 1) -> Future[Observation]:
        """Create the episode's env on the least-loaded worker and reset it."""
        with self._lock:
            self._check_open()
            if episode_id in self._home:
                raise SpreadrlError(f"episode {episode_id!r} is already running in this pool")
            self._crashed.pop(episode_id, None)
            worker = min(self._workers, key=lambda w: (len(w.episodes), w.index))
            worker.episodes.add(episode_id)
            self._home[episode_id] = worker.index
        return self._submit(episode_id, "reset", (task, case), {})

    def step(self, episode_id: Hashable, call: ToolCall) -> Future[StepResult]:
        return self._submit(episode_id, "step", (call,), {})

    def finish(self, episode_id: Hashable, **kwargs: str | None) -> Future[EpisodeResult]:
        """Score and close the episode; its env is dropped from the worker."""
        return self._submit(episode_id, "finish", (), kwargs)

    def map_steps(self, calls: Iterable[tuple[Hashable, ToolCall]]) -> list[StepResult]:
        """Run one call per episode concurrently; results in input order (raises the
        first failure, e.g. :class:`EpisodeCrashed`)."""
        futures = [self.step(episode_id, call) for episode_id, call in calls]
        return [f.result() for f in futures]

    def _submit(self, episode_id: Hashable, op: str, args: tuple, kwargs: dict) -> Future:
        future: Future = Future()
        with self._lock:
            self._check_open()
            if episode_id in self._crashed:
                future.set_exception(EpisodeCrashed(self._crashed[episode_id]))
                return future
            if episode_id not in self._home:
                raise SpreadrlError(
                    f"episode {episode_id!r} is not running in this pool; call reset first"
                )
            index = self._home[episode_id]
        worker = self._workers[index]
        worker.slots.acquire()  # back-pressure: blocks while max_pending are in flight
        with self._lock:
            if self._closed or self._workers[index] is not worker or episode_id in self._crashed:
                worker.slots.release()
                if self._closed:
                    return _failed(PoolClosed("the env pool is closed"))
                return _failed(
                    EpisodeCrashed(self._crashed.get(episode_id, "env worker restarted"))
                )
            req_id = self._next_id
            self._next_id += 1
            worker.pending[req_id] = (future, episode_id)
            if op == "finish":
                self._home.pop(episode_id, None)
                worker.episodes.discard(episode_id)
        try:
            with worker.send_lock:
                worker.conn.send((req_id, op, episode_id, args, kwargs))
        except (OSError, ValueError):
            pass  # the worker died; the collector fails this request with the others
        return future

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the env pool is closed")

    # ---- results and crashes ------------------------------------------------------

    def _collect(self) -> None:
        while not self._closed:
            workers = list(self._workers)
            by_conn = {w.conn: w for w in workers}
            by_sentinel = {w.process.sentinel: w for w in workers}
            for ready in wait([*by_conn, *by_sentinel], timeout=0.2):
                worker = by_conn.get(ready) or by_sentinel.get(ready)
                if worker is None or worker is not self._workers[worker.index]:
                    continue
                try:
                    while worker.conn.poll():
                        req_id, ok, value = worker.conn.recv()
                        self._resolve(worker, req_id, ok, value)
                except (EOFError, OSError):
                    pass
                if not worker.process.is_alive() and not self._closed:
                    self._restart(worker)

    def _resolve(self, worker: _Worker, req_id: int, ok: bool, value: object) -> None:
        with self._lock:
            entry = worker.pending.pop(req_id, None)
        if entry is None:
            return
        worker.slots.release()
        future, _ = entry
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def _restart(self, worker: _Worker) -> None:
        worker.process.join(timeout=1)
        code = worker.process.exitcode
        with self._lock:
            if self._closed:
                return
            lost = set(worker.episodes) | {ep for _, ep in worker.pending.values()}
            message = (
                f"env worker {worker.index} (pid {worker.process.pid}) died with exit code {code}"
                f"{_death_note(code, self._limits)}; episodes lost: {sorted(map(str, lost))}"
            )
            for episode_id in lost:
                self._crashed[episode_id] = message
                self._home.pop(episode_id, None)
            failed = list(worker.pending.values())
            worker.pending.clear()
            self._workers[worker.index] = self._start(worker.index)
            self.restarts += 1
        worker.conn.close()
        log.error("%s; restarted it", message)
        for future, _ in failed:
            worker.slots.release()  # wakes submitters blocked on the dead worker
            future.set_exception(EpisodeCrashed(message))

    # ---- shutdown -----------------------------------------------------------------

    def close(self, timeout: float = 10.0) -> None:
        """Let queued requests finish, stop the workers (killing any that hang) and fail
        whatever is still pending with :class:`PoolClosed`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for worker in self._workers:
            try:
                with worker.send_lock:
                    worker.conn.send(None)
            except (OSError, ValueError):
                pass
        self._collector.join()
        for worker in self._workers:
            self._drain(worker)
            worker.process.join(timeout)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            self._drain(worker)
            worker.conn.close()
            for future, _ in worker.pending.values():
                future.set_exception(PoolClosed("the env pool closed before this request ran"))
            worker.pending.clear()

    def _drain(self, worker: _Worker) -> None:
        try:
            while worker.conn.poll():
                self._resolve(worker, *worker.conn.recv())
        except (EOFError, OSError):
            pass

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _death_note(code: int | None, limits: WorkerLimits | None) -> str:
    """What a worker's exit status says about its limits (a C extension's failed allocation
    aborts; the kernel kills at the CPU limit; the watchdog exits with status 1)."""
    if limits is None or code is None:
        return ""
    if code < 0 and -code in (signal.SIGABRT, signal.SIGSEGV, signal.SIGKILL, signal.SIGXCPU):
        return (
            f" ({signal.Signals(-code).name}: an allocation over its {limits.memory_mb} MB "
            "memory limit aborts a C extension, or the kernel stopped it)"
        )
    if code == 1:
        return " (its watchdog ends a request stuck past its CPU budget)"
    return ""


def _failed(exc: BaseException) -> Future:
    future: Future = Future()
    future.set_exception(exc)
    return future


class InlineEnvPool:
    """The same interface run synchronously in the caller (num_workers=0): for tests,
    debugging with a plain traceback, and tiny CPU runs. A crash here is the caller's."""

    def __init__(
        self, env_factory: Callable[[], Any], num_workers: int = 0, max_pending: int | None = None
    ):
        self._factory = env_factory
        self._envs: dict[Hashable, Any] = {}
        self._closed = False

    def _call(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn())
        except Exception as exc:
            future.set_exception(exc)
        return future

    def _env(self, episode_id: Hashable) -> Env:
        if self._closed:
            raise PoolClosed("the env pool is closed")
        if episode_id not in self._envs:
            raise SpreadrlError(
                f"episode {episode_id!r} is not running in this pool; call reset first"
            )
        return self._envs[episode_id]

    def reset(self, episode_id: Hashable, task: Task, case: int = 1) -> Future[Observation]:
        if self._closed:
            raise PoolClosed("the env pool is closed")
        if episode_id in self._envs:
            raise SpreadrlError(f"episode {episode_id!r} is already running in this pool")
        env = self._envs[episode_id] = self._factory()
        return self._call(lambda: env.reset(task, case))

    def step(self, episode_id: Hashable, call: ToolCall) -> Future[StepResult]:
        env = self._env(episode_id)
        return self._call(lambda: env.step(call))

    def finish(self, episode_id: Hashable, **kwargs: str | None) -> Future[EpisodeResult]:
        env = self._env(episode_id)
        del self._envs[episode_id]

        def run() -> EpisodeResult:
            try:
                return env.finish(**kwargs)
            finally:
                env.close()

        return self._call(run)

    def map_steps(self, calls: Iterable[tuple[Hashable, ToolCall]]) -> list[StepResult]:
        return [self.step(episode_id, call).result() for episode_id, call in calls]

    def close(self) -> None:
        self._closed = True
        for env in self._envs.values():
            env.close()
        self._envs.clear()

    def __enter__(self) -> InlineEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

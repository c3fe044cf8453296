"""Forked harness episodes: one sandbox per rollout imports the harness once, each episode forks.

Starting a fresh sandboxed interpreter per episode costs its imports each time: an
openai-client agent with openpyxl imports for 1-2 CPU seconds, more than a tiny
model's whole turn, and a group's episodes pay it all at once on the same cores
(``spreadrl bench rollout --against harness``, docs/benchmarks.md). With
``rollout.harness_fork`` (the default, for a function in a file or module) a
:class:`ForkServer` starts one sandboxed process for the run, at its first rollout
(the code interpreter's sandbox and limits, in a folder of its own), that imports
the harness and then, on each request, forks a child for one episode: the child gets its own session and
process group, its own folder inside the rollout's (stdout and stderr written there),
the launcher's relay, environment and audit hook, and calls the harness. Per-process
limits (memory, CPU time, file size) hold for each child; the wall time is the host's
per episode, which kills the child's group.

What it gives up against a sandbox per episode: the children share the sandbox's
uid, so the process limit (``max_processes`` per episode) is counted for the
episodes running at once together, and an episode's folder is kept from its siblings' by
Landlock where the kernel has it (every write, the launcher's ``_confine``), else by the
audit hook alone (a Python harness's own writes). Harnesses
that must be kept apart from each other, or a command line (which cannot be
imported ahead), run a sandbox per episode (``rollout.harness_fork=false``).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import shutil
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path

from spreadrl.env.sandbox import SandboxLimits, SandboxResult, run_python
from spreadrl.rollout.harness.program import (
    OUTSIDE_EXIT,
    OUTSIDE_MARK,
    HarnessProgram,
    with_args,
)

CONTROL = ".forkserver.sock"
"""The fork server's control socket, in the rollout's folder."""
READY_S = 300.0
"""How long the fork server may take to import the harness before the rollout gives up."""
SERVER_S = 7 * 24 * 3600.0
"""The fork server's own wall and CPU time limit: a run's (it waits between rollouts)."""


class ForkServerError(RuntimeError):
    """The fork server did not start: the harness could not be imported, most often."""


class ForkServer:
    """One sandboxed process that imports ``program`` and forks it per episode."""

    def __init__(
        self,
        program: HarnessProgram,
        root: Path,
        limits: SandboxLimits,
        *,
        mode: str,
        episodes: int,
    ) -> None:
        self.program, self.root, self.limits = program, root, limits
        self._mode, self._episodes = mode, max(1, episodes)
        self._stop = threading.Event()
        self._server: Future[SandboxResult] = Future()
        self._waiting: dict[str, Future[int | None]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._conn: socket.socket | None = None
        self._owner: tuple[int, int] | None = None
        self._folders = itertools.count()
        self._closed = False

    @property
    def alive(self) -> bool:
        """Whether the server still answers (it ends when its sandbox does)."""
        return self._conn is not None and not self._closed and not self._server.done()

    def start(self) -> ForkServer:
        """Start the server and wait until it has imported the harness (or failed)."""
        limits = replace(  # the server's own time: the run's (each episode has its own)
            self.limits,
            wall_time_s=SERVER_S,
            cpu_time_s=int(SERVER_S),
            max_processes=self.limits.max_processes * self._episodes + 1,
        )
        args = {
            "kind": self.program.kind,
            "target": self.program.target,
            "roots": list(self.program.read_only),
            "folder": str(self.root),
            "control": CONTROL,
            "outside_mark": OUTSIDE_MARK,
            "outside_exit": OUTSIDE_EXIT,
        }
        code = with_args(args, _SERVER)

        def serve() -> None:
            try:
                self._server.set_result(
                    run_python(
                        code,
                        self.root,
                        limits,
                        mode=self._mode,
                        read_only=self.program.read_only,
                        stop=self._stop,
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - handed to every episode
                self._server.set_exception(exc)

        threading.Thread(target=serve, name="harness-forkserver", daemon=True).start()
        control = self.root / CONTROL
        deadline = time.monotonic() + READY_S
        while not control.exists():
            if self._server.done() or time.monotonic() > deadline:
                self.close()
                raise ForkServerError(f"the harness failed to start (import): {self._why()}")
            time.sleep(0.01)
        stat = self.root.stat()
        self._owner = (stat.st_uid, stat.st_gid)
        self._conn = _connect(control)
        threading.Thread(target=self._read, name="harness-forkserver-read", daemon=True).start()
        atexit.register(self.close)
        return self

    def folder(self) -> Path:
        """A new episode folder inside the server's, owned as the server's sandbox is."""
        folder = self.root / f"episode-{next(self._folders)}"
        folder.mkdir()
        if self._owner is not None and self._owner != (os.getuid(), os.getgid()):
            os.chown(folder, *self._owner)
        return folder

    def own(self, path: Path) -> None:
        """Hand ``path`` (a file the host put in an episode folder) to the sandbox's uid."""
        if self._owner is not None and self._owner != (os.getuid(), os.getgid()):
            os.chown(path, *self._owner)

    def run(
        self, args: dict[str, object], wall_time_s: float, stop: threading.Event
    ) -> SandboxResult:
        """Play one episode (``args``: :func:`~spreadrl.rollout.harness.program.launcher_args`)
        in a forked child; killed when ``stop`` is set or past ``wall_time_s``."""
        start = time.monotonic()
        key = str(next(self._ids))
        done: Future[int | None] = Future()
        with self._lock:
            self._waiting[key] = done
        try:
            self._send({"run": key, "args": args})
        except OSError:
            done.set_result(None)
        verdict = ""
        while not done.done():
            if stop.is_set() or time.monotonic() - start > wall_time_s:
                verdict = "stopped" if stop.is_set() else "timeout"
                with contextlib.suppress(OSError):
                    self._send({"kill": key})
                break
            with contextlib.suppress(TimeoutError):
                done.result(timeout=0.05)
        with contextlib.suppress(TimeoutError):  # the kill landing (the child reaped)
            done.result(timeout=30)
        code = done.result() if done.done() and not verdict else None
        folder = Path(str(args["folder"]))
        out, err = (_tail(folder / name, self.limits.max_output_chars) for name in _OUTPUTS)
        backend = f"fork/{self._server.result().sandbox}" if self._server.done() else "fork"
        error = None
        if verdict == "stopped":
            error = "stopped by the caller"
        elif verdict == "timeout":
            error = f"killed after {wall_time_s:g} s wall time"
        elif code is None:
            error = f"the harness's fork server ended: {self._why()}"
        elif code < 0:
            error = f"killed by signal {-code}"
        return SandboxResult(
            out, err, code, verdict == "timeout", error, time.monotonic() - start, backend
        )

    def close(self) -> None:
        """End the server (and any child still running) and remove its folder."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.shutdown(socket.SHUT_RDWR)
            self._conn.close()
        try:
            self._server.result(timeout=10)
        except Exception:  # noqa: BLE001 - still running, or it never started: stop it
            self._stop.set()
            with contextlib.suppress(Exception):
                self._server.result(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- the control connection ---------------------------------------------------
    def _send(self, message: dict[str, object]) -> None:
        assert self._conn is not None
        with self._lock:
            self._conn.sendall((json.dumps(message) + "\n").encode())

    def _read(self) -> None:
        assert self._conn is not None
        buffer = b""
        try:
            while chunk := self._conn.recv(65536):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    with self._lock:
                        done = self._waiting.pop(message["done"], None)
                    if done is not None:
                        done.set_result(int(message["code"]))
        except OSError:
            pass
        with self._lock:  # the server is gone: nothing still waiting will be answered
            left, self._waiting = list(self._waiting.values()), {}
        for done in left:
            done.set_result(None)

    def _why(self) -> str:
        if not self._server.done():
            return "it is still running"
        if self._server.exception() is not None:
            return str(self._server.exception())
        result = self._server.result()
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit {result.exit_code}, {result.error or last}"


_OUTPUTS = (".stdout", ".stderr")


def _connect(path: Path) -> socket.socket:
    """Connect to a Unix socket through its folder's descriptor (a path holds 107 bytes)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.connect(f"/proc/self/fd/{folder}/{path.name}")
    finally:
        os.close(folder)
    return sock


def _tail(path: Path, chars: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-chars:]


# Run in the sandbox after LAUNCHER_DEFS: import the harness (its own writes kept to the
# rollout's folder), then serve the control socket: {"run": key, "args": {...}} forks an
# episode, {"kill": key} kills its group, each child's end is sent as {"done", "code"}.
# One thread only (fork needs it); the socket closing ends the server and its children.
_SERVER = r"""
import gc, json as _json, selectors, signal, traceback

sys.addaudithook(_audit)
MODULE = _load(ARGS)


def _warm():
    # an HTTP client's first construction imports its transports and TLS (0.2 s here):
    # once here rather than in every child; no connection is made
    try:
        if "httpx" in sys.modules:
            sys.modules["httpx"].Client(base_url="http://127.0.0.1:9").close()
        if "openai" in sys.modules:
            sys.modules["openai"].OpenAI(api_key="-", base_url="http://127.0.0.1:9/v1").close()
    except Exception:
        pass


_warm()
gc.freeze()  # the children's collections skip what was imported: fewer copied pages
control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
control.bind(ARGS["control"] + ".tmp")
os.chmod(ARGS["control"] + ".tmp", 0o777)
control.listen(1)
os.rename(ARGS["control"] + ".tmp", ARGS["control"])  # ready once the name exists
conn, _ = control.accept()
control.close()


def _child(args):
    global FOLDER
    conn.close()
    os.setsid()
    FOLDER = os.path.realpath(args["folder"])
    for fd, name in ((1, ".stdout"), (2, ".stderr")):
        out = os.open(os.path.join(FOLDER, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    code = 0
    try:
        _play(MODULE, args, _enter(args))
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _kill(pid):
    for kill in (os.killpg, os.kill):  # its group, and itself before its setsid
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _handle(message, children):
    if "run" in message:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(message["args"])
        children[pid] = message["run"]
        return
    for pid, key in children.items():
        if key == message["kill"]:
            _kill(pid)


def _reap(children):
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        key = children.pop(pid, None)
        try:  # what the episode left running in its group
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if key is None:
            continue
        reply = _json.dumps({"done": key, "code": os.waitstatus_to_exitcode(status)})
        conn.sendall((reply + "\n").encode())


children = {}
pending = b""
selector = selectors.DefaultSelector()
selector.register(conn, selectors.EVENT_READ)
try:
    while True:
        if selector.select(timeout=0.02):
            data = conn.recv(65536)
            if not data:
                break
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _handle(_json.loads(line), children)
        _reap(children)
except OSError:
    pass
for pid in children:
    _kill(pid)
"""

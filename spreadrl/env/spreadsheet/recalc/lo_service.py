"""One LibreOffice per machine: a small service every process of a user shares.

Each long-lived process that met an untrusted cell used to start its own headless
``soffice`` (about 160 MB resident, 1.3 s to start): a tool pool of 8 workers plus the
trainer, eval and serve meant up to 11 of them. Here the first process that needs
LibreOffice starts one service process (``python -m spreadrl.env.spreadsheet.recalc.lo_service_main``,
in its own session, so it outlives none of the checks it serves by more than its idle
time); it owns one :class:`~spreadrl.env.spreadsheet.recalc.libreoffice.LibreOfficeServer` (one
soffice over UNO, restarted after a crash or a timeout) and listens on a Unix socket
private to the user. Clients send one JSON line ``{"src", "dst"}`` per connection and
read one reply line.

* **Serial:** LibreOffice recalculates one workbook at a time (UNO calls serialise on its
  global lock anyway); requests wait in the service's queue.
* **Back-pressure:** at most ``max_pending`` requests wait; beyond that the service answers
  ``{"busy": true}`` at once and the client retries with a growing pause until its own
  deadline, then raises WorkbookError (the hybrid then keeps IronCalc's values, warned).
* **Restart on crash:** soffice dying is the server's business (it restarts soffice and
  tries the request once more; a second death is answered ``crashed``, which the client
  raises as EngineCrashed, never as the workbook's fault); the service dying (killed, OOM) leaves a stale socket: the next client removes it
  and starts a new service, under a lock file, so concurrent clients start only one.
* **Idle exit:** the service exits after ``idle_s`` without a request (default 300 s).

* **One spreadrl per service:** the socket's name carries the protocol and an install tag
  (a hash of the package's version and folder), so two checkouts, or two versions, of
  spreadrl never share a service. The handshake checks the tag too: a service found on
  the socket that answers with another tag (``SPREADRL_LO_SOCKET`` pointed two installs
  at one path) is never used, and every request carries the tag, which the service
  refuses when it is not its own.

``SPREADRL_LIBREOFFICE=process`` gives the old behaviour (one soffice per process);
``SPREADRL_LO_SOCKET`` moves the socket (default:
``$TMPDIR/spreadrl-lo-<uid>-v<protocol>-<install tag>.sock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import resource
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

from spreadrl import __version__
from spreadrl.errors import EngineCrashed, WorkbookError

PROTOCOL = 1  # in the socket's name: a changed protocol gets its own service
DEFAULT_MAX_PENDING = 32
DEFAULT_IDLE_S = 300.0


def service_mode() -> str:
    """``machine`` (one shared service, the default) or ``process`` (one soffice each)."""
    mode = os.environ.get("SPREADRL_LIBREOFFICE", "machine").strip().lower()
    return "process" if mode == "process" else "machine"


def install_tag() -> str:
    """This spreadrl's identity: a short hash of its version and the folder it runs from.

    The service runs this very package's code (:func:`_our_pythonpath`); another
    checkout or version may convert differently, so it gets a service of its own."""
    package = Path(__file__).resolve().parents[3]
    return hashlib.sha256(f"{__version__}\0{package}".encode()).hexdigest()[:12]


def socket_path() -> Path:
    """Where the service listens: ``$SPREADRL_LO_SOCKET`` or a per-user, per-install path
    in $TMPDIR."""
    override = os.environ.get("SPREADRL_LO_SOCKET")
    if override:
        return Path(override)
    name = f"spreadrl-lo-{os.getuid()}-v{PROTOCOL}-{install_tag()}.sock"
    return Path(tempfile.gettempdir()) / name


class ServiceClient:
    """Recalculate through the machine's LibreOffice service, starting it when needed."""

    def __init__(
        self, soffice: str, python: str, timeout_s: float = 120.0, path: Path | None = None
    ) -> None:
        self.soffice = soffice
        self.python = python
        self.timeout_s = timeout_s
        self.path = path or socket_path()
        self.tag = install_tag()
        self._verified = False  # the handshake found this install's service on the path

    def convert(self, src: Path, dst: Path) -> None:
        """Recalculate ``src`` into ``dst`` (xlsx); WorkbookError naming ``src`` on failure."""
        request = json.dumps(
            {"src": str(Path(src).resolve()), "dst": str(Path(dst).resolve()), "tag": self.tag}
        )
        deadline = time.monotonic() + self.timeout_s + 120.0  # a start, and a queue, allowed
        if not self._verified:  # an older service ignores the request's tag: ask first
            found = _ping(self.path)
            if found is not None and found.get("tag") != self.tag:
                raise WorkbookError(_foreign(self.path, found))
            self._verified = found is not None  # else the start below checks it
        pause = 0.05
        restarted = False
        while True:
            try:
                reply = self._ask(request, deadline)
            except (FileNotFoundError, ConnectionRefusedError):
                self._start_service(deadline)
                continue
            except (EOFError, ConnectionResetError, BrokenPipeError) as exc:
                if restarted:  # the service died twice on this file: give up on it
                    raise EngineCrashed(f"{src}: the LibreOffice service died on it") from exc
                restarted = True
                continue
            if reply.get("foreign"):
                raise WorkbookError(_foreign(self.path, reply))
            if reply.get("busy"):
                if time.monotonic() + pause > deadline:
                    raise WorkbookError(f"{src}: the LibreOffice service stayed busy")
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            if reply.get("crashed"):  # soffice died under it twice (the server retried once)
                raise EngineCrashed(f"{src}: {reply.get('error')}")
            if not reply.get("ok"):
                raise WorkbookError(
                    f"{src}: LibreOffice could not recalculate it ({reply.get('error')})"
                )
            return

    def _ask(self, request: str, deadline: float) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(max(deadline - time.monotonic(), 1.0))
            conn.connect(str(self.path))
            conn.sendall(request.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                try:
                    chunk = conn.recv(65536)
                except TimeoutError as exc:
                    raise WorkbookError("the LibreOffice service did not answer in time") from exc
                if not chunk:
                    raise EOFError
                data += chunk
        return json.loads(data)

    def _start_service(self, deadline: float) -> None:
        """Start the service unless another client just did (a lock file decides)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = _ping(self.path)
            if found is not None:
                if found.get("tag") != self.tag:  # alive, but another spreadrl's: never ours
                    raise WorkbookError(_foreign(self.path, found))
                self._verified = True
                return
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()  # a stale socket of a dead service
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "spreadrl.env.spreadsheet.recalc.lo_service_main",
                    "--socket",
                    str(self.path),
                    "--soffice",
                    self.soffice,
                    "--python",
                    self.python,
                    "--timeout",
                    str(self.timeout_s),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": _our_pythonpath()},
                preexec_fn=_lift_cpu_budget,  # noqa: PLW1509 -- only setrlimit
            )
            while _ping(self.path) is None:
                if time.monotonic() > deadline:
                    raise WorkbookError("the LibreOffice service did not start")
                time.sleep(0.05)
            self._verified = True


def _lift_cpu_budget() -> None:
    """The service outlives the request that started it: it must not inherit the per-request
    CPU budget of an environment worker (spreadrl.env.limits). Its soffice has its own."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))


def _our_pythonpath() -> str:
    """PYTHONPATH that finds this very spreadrl (a source checkout as well as an install)."""
    root = str(Path(__file__).resolve().parents[4])
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


def _foreign(path: Path, reply: dict) -> str:
    theirs = reply.get("version") or "an older version"
    return (
        f"the LibreOffice service on {path} belongs to another spreadrl ({theirs}, install "
        f"{reply.get('tag') or 'untagged'}; this one is {__version__}, install {install_tag()}):"
        " not used; unset SPREADRL_LO_SOCKET or give each install its own"
    )


def _ping(path: Path) -> dict | None:
    """The handshake: the service's pid, install tag and version, or None if none answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10.0)
        try:
            conn.connect(str(path))
            conn.sendall(b'{"ping": true}\n')
            reply = json.loads(conn.makefile().readline())
        except (OSError, ValueError):
            return None
    return reply if isinstance(reply, dict) and reply.get("pid") else None


def service_pid(path: Path | None = None) -> int | None:
    """The pid of this spreadrl's service on ``path`` (default :func:`socket_path`), or
    None (no service, or another install's)."""
    reply = _ping(path or socket_path())
    if reply is None or reply.get("tag") != install_tag():
        return None
    return int(reply["pid"])


class Converter(Protocol):
    """What the service drives: a LibreOfficeServer, or a test's stand-in."""

    def convert(self, src: Path, dst: Path) -> None: ...

    def close(self) -> None: ...


class _Service(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, server: Converter, max_pending: int) -> None:
        self.lo = server
        self.max_pending = max_pending
        self.active = 0  # requests waiting or running
        self.lock = threading.Lock()
        self.last_request = time.monotonic()
        super().__init__(str(path), _Handler)

    def admit(self) -> bool:
        with self.lock:
            self.last_request = time.monotonic()
            if self.active >= self.max_pending:
                return False
            self.active += 1
            return True

    def done(self) -> None:
        with self.lock:
            self.active -= 1
            self.last_request = time.monotonic()

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.active else time.monotonic() - self.last_request


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        service: _Service = self.server  # type: ignore[assignment]
        line = self.rfile.readline()
        try:
            request = json.loads(line)
        except ValueError:
            return
        tag = install_tag()
        if request.get("ping"):
            hello = {"ok": True, "pid": os.getpid(), "tag": tag, "version": __version__}
            self.wfile.write((json.dumps(hello) + "\n").encode())
            return
        if request.get("tag", tag) != tag:  # a client of another spreadrl: not served
            refusal = {"ok": False, "foreign": True, "tag": tag, "version": __version__}
            self.wfile.write((json.dumps(refusal) + "\n").encode())
            return
        if not service.admit():
            self.wfile.write(b'{"busy": true}\n')
            return
        try:
            service.lo.convert(Path(request["src"]), Path(request["dst"]))
            reply = {"ok": True}
        except EngineCrashed as exc:  # not the file's fault: the client must not score it
            reply = {"ok": False, "crashed": True, "error": str(exc)[:300]}
        except Exception as exc:  # a bad file must not stop the service
            reply = {"ok": False, "error": str(exc)[:300]}
        finally:
            service.done()
        with contextlib.suppress(OSError):
            self.wfile.write((json.dumps(reply) + "\n").encode())


def serve(
    path: Path,
    lo: Converter,
    *,
    max_pending: int = DEFAULT_MAX_PENDING,
    idle_s: float = DEFAULT_IDLE_S,
    ready: threading.Event | None = None,
) -> None:
    """Serve ``lo`` on ``path`` until ``idle_s`` pass without a request.

    ``lo``: a :class:`~spreadrl.env.spreadsheet.recalc.libreoffice.LibreOfficeServer` (anything with
    ``convert(src, dst)`` and ``close()``: tests pass a stand-in); ``ready`` is set once
    the socket listens. The service process runs :mod:`.lo_service_main`.
    """
    service = _Service(path, lo, max_pending)
    os.chmod(path, 0o600)  # the user's own: files named in requests are read as that user

    def watch_idle() -> None:
        while True:
            time.sleep(min(idle_s, 5.0))
            if service.idle_for() > idle_s:
                service.shutdown()
                return

    threading.Thread(target=watch_idle, daemon=True).start()
    if ready is not None:
        ready.set()
    try:
        service.serve_forever(poll_interval=0.2)
    finally:
        service.server_close()
        lo.close()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

"""One LibreOffice per machine: processes share one service, with back-pressure and restarts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.spreadsheet.recalc import lo_service
from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine
from tests.sysdeps import needs_libreoffice

needs_lo = needs_libreoffice
ROOT = Path(__file__).resolve().parents[3]


class SlowCopy:
    """A stand-in LibreOffice: copies the file after ``delay`` seconds, one at a time."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.closed = False

    def convert(self, src: Path, dst: Path) -> None:
        with self.lock:
            time.sleep(self.delay)
            shutil.copyfile(src, dst)

    def close(self) -> None:
        self.closed = True


def _serve_in_thread(path: Path, fake: SlowCopy | HeldCopy, **kw) -> threading.Thread:
    ready = threading.Event()
    thread = threading.Thread(
        target=lo_service.serve,
        args=(path, fake),
        kwargs={"ready": ready, **kw},
        daemon=True,
    )
    thread.start()
    assert ready.wait(10)
    return thread


@pytest.fixture
def sock() -> Iterator[Path]:
    """A socket path under the system's temporary folder: AF_UNIX takes at most 107 bytes,
    and a long --basetemp would make ``tmp_path / "lo.sock"`` longer."""
    folder = Path(tempfile.mkdtemp(prefix="spreadrl-lo-test-"))
    yield folder / "lo.sock"
    shutil.rmtree(folder, ignore_errors=True)


def _ask(path: Path, src: Path, dst: Path) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)  # a service that never answers fails the test, not hangs it
        conn.connect(str(path))
        conn.sendall(json.dumps({"src": str(src), "dst": str(dst)}).encode() + b"\n")
        return json.loads(conn.makefile().readline())


class HeldCopy:
    """A stand-in LibreOffice that holds each conversion until ``release`` is set: the test,
    not the machine's speed, decides how long the first request is being served."""

    def __init__(self) -> None:
        self.serving = threading.Event()  # a conversion has begun
        self.release = threading.Event()
        self.closed = False

    def convert(self, src: Path, dst: Path) -> None:
        self.serving.set()
        if not self.release.wait(30):
            raise TimeoutError("never released")
        shutil.copyfile(src, dst)

    def close(self) -> None:
        self.closed = True


def test_requests_beyond_the_queue_are_told_busy_and_the_client_waits(
    tmp_path: Path, sock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = HeldCopy()
    thread = _serve_in_thread(sock, fake, max_pending=1, idle_s=60)
    src = tmp_path / "in.xlsx"
    src.write_bytes(b"workbook")
    replies: list[dict] = []
    first = threading.Thread(target=lambda: replies.append(_ask(sock, src, tmp_path / "a")))
    first.start()
    assert fake.serving.wait(10)  # the first request is being served, and stays so
    assert _ask(sock, src, tmp_path / "b") == {"busy": True}
    # the client's answer to "busy" is to pause and retry: the first pause lets the first
    # request finish, and the client then gets its turn
    me, pauses, real_sleep = threading.get_ident(), [], time.sleep

    def pause(seconds: float) -> None:
        if threading.get_ident() == me:
            pauses.append(seconds)
            fake.release.set()
        real_sleep(seconds)

    clock = types.SimpleNamespace(monotonic=time.monotonic, sleep=pause)
    monkeypatch.setattr(lo_service, "time", clock)
    client = lo_service.ServiceClient("soffice", "python3", timeout_s=10, path=sock)
    client.convert(src, tmp_path / "c")
    first.join(10)
    assert pauses  # it was told busy and waited
    assert replies == [{"ok": True}]
    assert (tmp_path / "a").read_bytes() == (tmp_path / "c").read_bytes() == b"workbook"
    assert not (tmp_path / "b").exists()
    assert lo_service.service_pid(sock) == os.getpid()
    assert thread.is_alive()  # a daemon thread: it ends with the test process


def test_the_service_exits_when_idle_and_removes_its_socket(sock: Path) -> None:
    fake = SlowCopy(delay=0)
    thread = _serve_in_thread(sock, fake, idle_s=0.3)
    thread.join(10)
    assert not thread.is_alive()
    assert fake.closed and not sock.exists()


@needs_lo
def test_processes_share_one_service_which_restarts_after_a_crash(
    tmp_path: Path, sock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPREADRL_LO_SOCKET", str(sock))
    monkeypatch.setenv("SPREADRL_LIBREOFFICE", "machine")
    wb = openpyxl.Workbook()
    wb.active["A1"] = 1234.5
    wb.active["B1"] = '=TEXT(A1,"$#,##0")'
    wb.save(tmp_path / "w.xlsx")
    script = (
        "import sys; from pathlib import Path;"
        "from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine;"
        "from spreadrl.env.spreadsheet.recalc.ironcalc_engine import read_cached;"
        "out = Path(sys.argv[2]); LibreOfficeEngine().recalculate(Path(sys.argv[1]), out);"
        "print(read_cached(out)['Sheet']['B1'])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outs = []
    for name in ("p1.xlsx", "p2.xlsx"):  # two processes, one after the other
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "w.xlsx"), str(tmp_path / name)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        outs.append(done.stdout.strip())
        if name == "p1.xlsx":
            first_pid = lo_service.service_pid(sock)
    assert outs == ["$1,235", "$1,235"]
    assert first_pid is not None and lo_service.service_pid(sock) == first_pid
    # the service is killed (OOM, a stray kill): the next client starts a new one
    os.killpg(os.getpgid(first_pid), signal.SIGKILL)
    engine = LibreOfficeEngine(persistent=True)
    assert isinstance(engine.server, lo_service.ServiceClient)
    engine.recalculate(tmp_path / "w.xlsx", tmp_path / "p3.xlsx")
    second_pid = lo_service.service_pid(sock)
    assert second_pid not in (None, first_pid)
    os.killpg(os.getpgid(second_pid), signal.SIGKILL)

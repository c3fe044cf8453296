"""LibreOffice faults: soffice killed under a check, and a service of another spreadrl.

The kill is placed, not timed: a wrapper around ``LibreOfficeServer._convert_once``
SIGKILLs the running ``soffice.bin`` (found by PID under the server's helper) just
before the chosen request is sent, so soffice is gone while that request is under way,
on any machine however fast its conversions are. The server runs in the test's process
(``SPREADRL_LIBREOFFICE=process``); the machine's service drives the same server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.spreadsheet.recalc import lo_service
from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeServer, _process_tree, uno_python
from spreadrl.errors import EngineCrashed, WorkbookError
from tests.sysdeps import needs_libreoffice

SOFFICE = "/usr/bin/soffice"


def _office_pid(server: LibreOfficeServer) -> int | None:
    if server._proc is None or server._proc.poll() is not None:
        return None
    for pid in _process_tree(server._proc.pid):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "soffice.bin":
                return pid
        except OSError:
            continue
    return None


class KillSoffice:
    """Kill soffice under the conversions numbered in ``at`` (1 = the first request)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: set[int]) -> None:
        self.at, self.seen, self.killed = at, 0, []
        real = LibreOfficeServer._convert_once

        def convert_once(server: LibreOfficeServer, src: Path, dst: Path) -> None:
            self.seen += 1
            if self.seen in self.at:
                if _office_pid(server) is None:  # not started yet: start it, then kill it
                    server._start()
                pid = _office_pid(server)
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
            real(server, src, dst)

        monkeypatch.setattr(LibreOfficeServer, "_convert_once", convert_once)


def _text_book(path: Path) -> Path:
    """A workbook whose B1 IronCalc cannot be trusted on (TEXT with a format code)."""
    wb = openpyxl.Workbook()
    wb.active["A1"] = 1234.5
    wb.active["B1"] = '=TEXT(A1,"$#,##0")'
    wb.save(path)
    return path


@needs_libreoffice
def test_soffice_killed_under_a_request_is_restarted_and_the_request_retried(tmp_path):
    from spreadrl.env.spreadsheet.recalc.ironcalc_engine import read_cached

    src = _text_book(tmp_path / "w.xlsx")
    server = LibreOfficeServer(SOFFICE, uno_python())
    with pytest.MonkeyPatch.context() as mp:
        kills = KillSoffice(mp, at={2})
        try:
            server.convert(src, tmp_path / "a.xlsx")
            first = _office_pid(server)
            server.convert(src, tmp_path / "b.xlsx")  # soffice killed under it
            second = _office_pid(server)
        finally:
            server.close()
    assert kills.killed == [first] and second not in (None, first)  # a fresh soffice
    assert read_cached(tmp_path / "b.xlsx")["Sheet"]["B1"] == "$1,235"  # LibreOffice's


@needs_libreoffice
def test_soffice_dying_twice_is_an_engine_failure_never_a_failed_check(tmp_path, monkeypatch):
    from spreadrl.env.spreadsheet import checker
    from spreadrl.env.spreadsheet.recalc import libreoffice

    monkeypatch.setenv("SPREADRL_LIBREOFFICE", "process")
    monkeypatch.setattr(libreoffice, "_SERVERS", {})  # a server of this test's own
    answer = _text_book(tmp_path / "answer.xlsx")
    output = _text_book(tmp_path / "output.xlsx")  # the right answer
    # the answer recalculates first (conversion 1); the output's conversion and its retry die
    KillSoffice(monkeypatch, at={2, 3})
    with pytest.raises(EngineCrashed, match="LibreOffice died"):
        checker.check_workbook(output, answer, "B1", engine="hybrid")
    assert checker.check_workbook(output, answer, "B1", engine="hybrid").passed  # as it is
    libreoffice._close_servers()


@needs_libreoffice
def test_an_eval_with_soffice_killed_counts_right(tmp_path, monkeypatch):
    from spreadrl.data.builtin import builtin_tasks
    from spreadrl.data.task import TaskSet
    from spreadrl.env.config import EnvConfig
    from spreadrl.env.factory import make_env_pool
    from spreadrl.env.spreadsheet.recalc import libreoffice
    from spreadrl.eval.runner import run_eval
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.engines.scripted import OraclePolicy

    monkeypatch.setenv("SPREADRL_LIBREOFFICE", "process")
    monkeypatch.setattr(libreoffice, "_SERVERS", {})
    demo = builtin_tasks("demo-test")
    tasks = TaskSet(demo.root, demo.tasks[:3])
    episodes = len(tasks.episodes())
    # every check through LibreOffice: each episode recalculates its answer and its output
    env = EnvConfig(engine="libreoffice")
    # one conversion per episode (its output): the second dies once and is retried, the
    # third dies on its retry too
    kills = KillSoffice(monkeypatch, at={2, 4, 5})
    with make_env_pool(env, workers=0) as pool:
        report = run_eval(tasks, OraclePolicy(), pool, RolloutConfig(max_turns=8), tmp_path / "e")
    libreoffice._close_servers()
    assert len(kills.killed) == 3, kills.seen
    assert report["episodes"] == episodes
    # the oracle solves every case: a death retried changes nothing, and the death that
    # stayed is an engine failure of one episode, never a failed answer
    assert report["episode_errors"] == 1
    assert "EngineCrashed" in report["errors"][0]["error"]
    trajs = [json.loads(line) for line in (tmp_path / "e" / "trajectories.jsonl").open()]
    assert sum(1 for t in trajs if t.get("passed") and not t.get("error")) == episodes - 1
    assert not [t for t in trajs if not t.get("passed") and not t.get("error")]


@pytest.fixture
def sock() -> Iterator[Path]:
    """A socket path under the system's temporary folder: AF_UNIX takes at most 107 bytes,
    and a long --basetemp would make ``tmp_path / "lo.sock"`` longer."""
    folder = Path(tempfile.mkdtemp(prefix="spreadrl-lo-test-"))
    yield folder / "lo.sock"
    shutil.rmtree(folder, ignore_errors=True)


def _foreign_service(path: Path, tag: str | None) -> threading.Thread:
    """A service on ``path`` that answers the handshake as another install (``tag``; None:
    an older spreadrl that sends none) and would copy any file it is asked to."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    asked: list[dict] = []

    def serve() -> None:
        while True:
            conn, _ = server.accept()
            with conn:
                request = json.loads(conn.makefile().readline())
                asked.append(request)
                hello = {"ok": True, "pid": os.getpid(), "version": "0.0.9"}
                if tag is not None:
                    hello["tag"] = tag
                conn.sendall((json.dumps(hello) + "\n").encode())

    thread = threading.Thread(target=serve, daemon=True)
    thread.asked = asked  # type: ignore[attr-defined]
    thread.start()
    return thread


@pytest.mark.parametrize("tag", ["0123456789ab", None])
def test_a_service_of_another_install_is_never_used(sock, tmp_path, monkeypatch, tag):
    foreign = _foreign_service(sock, tag)
    monkeypatch.setenv("SPREADRL_LO_SOCKET", str(sock))  # two installs pointed at one path
    client = lo_service.ServiceClient("soffice", "python3", timeout_s=5)
    src = tmp_path / "in.xlsx"
    src.write_bytes(b"workbook")
    with pytest.raises(WorkbookError, match="belongs to another spreadrl"):
        client.convert(src, tmp_path / "out.xlsx")
    assert all(r.get("ping") for r in foreign.asked)  # asked who it is, never to convert
    assert sock.exists()  # another install's live service is left alone
    assert lo_service.service_pid(sock) is None


def test_the_socket_names_the_install_and_the_service_refuses_another_installs_request(
    sock, tmp_path, monkeypatch
):
    monkeypatch.delenv("SPREADRL_LO_SOCKET", raising=False)
    name = lo_service.socket_path().name
    assert lo_service.install_tag() in name and f"-{os.getuid()}-" in name

    class Copy:
        def convert(self, src: Path, dst: Path) -> None:
            dst.write_bytes(src.read_bytes())

        def close(self) -> None:
            pass

    ready = threading.Event()
    threading.Thread(
        target=lo_service.serve, args=(sock, Copy()), kwargs={"ready": ready}, daemon=True
    ).start()
    assert ready.wait(10)
    src = tmp_path / "in.xlsx"
    src.write_bytes(b"workbook")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(sock))
        request = {"src": str(src), "dst": str(tmp_path / "x.xlsx"), "tag": "not-this-one"}
        conn.sendall(json.dumps(request).encode() + b"\n")
        reply = json.loads(conn.makefile().readline())
    assert reply["foreign"] and reply["tag"] == lo_service.install_tag()
    assert not (tmp_path / "x.xlsx").exists()
    # this install's own client is served
    lo_service.ServiceClient("soffice", "python3", timeout_s=5, path=sock).convert(
        src, tmp_path / "y.xlsx"
    )
    assert (tmp_path / "y.xlsx").read_bytes() == b"workbook"


@needs_libreoffice
def test_the_service_retries_a_dead_soffice_and_relays_a_second_death(sock, tmp_path, monkeypatch):
    # the machine's service drives the same server: a client sees the retry succeed,
    # and a death twice over arrives as EngineCrashed, not as "could not recalculate"
    from spreadrl.env.spreadsheet.recalc.ironcalc_engine import read_cached

    server = LibreOfficeServer(SOFFICE, uno_python())
    ready = threading.Event()
    threading.Thread(
        target=lo_service.serve, args=(sock, server), kwargs={"ready": ready}, daemon=True
    ).start()
    assert ready.wait(10)
    client = lo_service.ServiceClient(SOFFICE, uno_python(), timeout_s=60, path=sock)
    src = _text_book(tmp_path / "w.xlsx")
    kills = KillSoffice(monkeypatch, at={1, 3, 4})
    try:
        client.convert(src, tmp_path / "a.xlsx")  # killed under it, retried
        with pytest.raises(EngineCrashed):
            client.convert(src, tmp_path / "b.xlsx")  # killed under it and its retry
        client.convert(src, tmp_path / "c.xlsx")  # a fresh soffice serves the next one
    finally:
        server.close()
    assert len(kills.killed) == 3
    assert read_cached(tmp_path / "a.xlsx")["Sheet"]["B1"] == "$1,235"
    assert read_cached(tmp_path / "c.xlsx")["Sheet"]["B1"] == "$1,235"

"""Fixtures of the standard-environment leg (``make test-envs``; tests marked ``envs``).

These tests need the ``openenv`` and ``bench`` (TRL) extras (``.venv-envs``), or the
``verifiers`` extra and the taskset ``packages/verifiers-spreadsheet``
(``.venv-envs-vf``: the verifiers tests and the docs pages marked envs), and fail, never
skip, when a package is missing. ``tasks_dir``
is a small synthesized task set with reference solutions; ``openenv_url`` is
``spreadrl env serve`` itself, started as a subprocess on a free port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from spreadrl.data.builtin import DEMO_FAMILIES
from spreadrl.data.synth import synthesize

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "write_range,inspect_range"


@pytest.fixture(scope="session")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four one-case tasks of the demo families, each with its reference solution."""
    out = tmp_path_factory.mktemp("tasks") / "set"
    synthesize(out, 4, seed=34, families=DEMO_FAMILIES, difficulty=("easy",), cases=1)
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def env_server(
    tasks: Path | None, *extra: str, tools: str = TOOLS, log_dir: Path | None = None
) -> Iterator[str]:
    """``spreadrl env serve`` in a subprocess (over ``tasks``, else as ``extra`` says);
    yields its http URL once /health answers."""
    port = free_port()
    command = [sys.executable, "-m", "spreadrl", "env", "serve"]
    command += ["--tasks", str(tasks)] if tasks is not None else []
    command += ["--tools", tools, "--port", str(port), *extra]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # the server's output goes to a file: an unread pipe fills up and blocks the server
    log = (log_dir or tasks.parent) / f"env-serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                output = log.read_text(errors="replace")
                raise AssertionError(f"env serve exited with {process.returncode}:\n{output}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("env serve did not answer /health within 120 s")
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def openenv_url(tasks_dir: Path) -> Iterator[str]:
    with env_server(tasks_dir, "--workers", "2") as url:
        yield url

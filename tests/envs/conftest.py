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
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spreadrl.data.builtin import DEMO_FAMILIES
from spreadrl.data.synth import synthesize
from tests.spawn import free_port, serving

ROOT = Path(__file__).resolve().parents[2]
TOOLS = "write_range,inspect_range"


@pytest.fixture(scope="session")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four one-case tasks of the demo families, each with its reference solution."""
    out = tmp_path_factory.mktemp("tasks") / "set"
    synthesize(out, 4, seed=34, families=DEMO_FAMILIES, difficulty=("easy",), cases=1)
    return out


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
    log = (log_dir or tasks.parent) / f"env-serve-{port}.log"
    with serving(command, port, log=log, env=env) as url:
        yield url


@pytest.fixture(scope="session")
def openenv_url(tasks_dir: Path) -> Iterator[str]:
    with env_server(tasks_dir, "--workers", "2") as url:
        yield url

"""The environment package (packages/openenv-spreadsheet) as OpenEnv takes one, and spreadrl
installed from its wheel.

- `openenv validate` on the package folder (static: manifest, uv.lock, the `server` script,
  server/app.py's main()), and `openenv validate --url` against server.app:app, served from
  the package folder, followed by a reset and a schema-correct step over HTTP and one episode
  of the package's light client (OpenEnv's MCP tool client).
- `python -m build` makes a wheel and an sdist; the wheel, installed into an empty venv (torch
  first, from local disk as the Makefile does), runs `spreadrl env serve` and one episode of
  OpenEnv's generic client. The image is not built: this machine has no Docker daemon.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from spreadrl.data.task import load_tasks
from tests.envs.conftest import ROOT
from tests.spawn import free_port, serving

pytestmark = pytest.mark.envs
PACKAGE = ROOT / "packages" / "openenv-spreadsheet"
BIN = Path(sys.executable).parent


def test_the_dockerfile_passes_hadolint():
    """Linted, not built: this machine has no Docker daemon."""
    dockerfile = PACKAGE / "server" / "Dockerfile"
    done = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    text = dockerfile.read_text()
    assert "libreoffice-calc-nogui" in text and "bubblewrap" in text


def _openenv(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "openenv"), "validate", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_openenv_validate_passes_the_package_statically():
    from openenv.cli._validation import validate_multi_mode_deployment

    assert validate_multi_mode_deployment(PACKAGE) == (True, [])
    done = _openenv(str(PACKAGE), "--level", "static")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS  static.manifest" in done.stdout
    assert "FAIL" not in done.stdout


@contextmanager
def _serve(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    port = free_port()
    with serving(
        [*command, "--port", str(port)], port, log=log, cwd=cwd, env=env, timeout_s=180
    ) as url:
        yield url


def _light_client():
    """The package's client.py as its users import it (it needs openenv only)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("light_client", PACKAGE / "client.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_packaged_server_validates_live_and_its_light_client_scores_one(tasks_dir, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(PACKAGE), str(ROOT)]),
        "SPREADRL_TASKS": str(tasks_dir),
        "SPREADRL_TOOLS": "write_range,inspect_range",
    }
    command = [sys.executable, "-m", "uvicorn", "server.app:app"]
    task = load_tasks(tasks_dir).tasks[0]
    calls = task.case(1).load_solution()
    with _serve(command, PACKAGE, env, tmp_path / "server.log") as url:
        done = _openenv("--url", url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Verdict: PASS" in done.stdout and "FAIL" not in done.stdout
        first = httpx.post(f"{url}/reset", json={"task_id": task.id}, timeout=60).json()
        assert first["observation"]["info"]["task_id"] == task.id
        action_schema = httpx.get(f"{url}/schema", timeout=30).json()["action"]
        assert {"type", "tool_name", "arguments"} <= set(action_schema["properties"])
        step = httpx.post(
            f"{url}/step",
            json={"action": {"type": "list_tools"}},
            timeout=60,
        ).json()
        assert [t["name"] for t in step["observation"]["tools"]][-1] == "final_answer"

        client = _light_client()

        async def episode() -> str:
            async with client.SpreadsheetEnv(base_url=url) as light:
                await light.reset(task_id=task.id)
                for call in calls:
                    await light.call_tool(call["name"], **call["arguments"])
                return await light.call_tool("final_answer", answer="done")

        assert asyncio.run(episode()) == "reward 1"


def test_the_wheel_installs_into_an_empty_venv_and_serves(tasks_dir, tmp_path):
    from openenv.core.generic_client import GenericEnvClient

    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = dist.glob("spreadrl-*.whl")
    assert len(list(dist.glob("spreadrl-*.tar.gz"))) == 1
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "-q"]
    for args in (["torch==2.13.0"], [f"{wheel}[openenv,serve]"]):
        done = subprocess.run(pip + args, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    python = str(target / "bin" / "python")
    data = subprocess.run(
        [python, "-c", "from importlib import resources as r; f = r.files('spreadrl');"
         "print((f / 'configs/tiny-cpu.yaml').is_file(), (f / 'assets/web/viewer.html').is_file())"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert data.stdout.split() == ["True", "True"], data.stdout + data.stderr
    task = load_tasks(tasks_dir).tasks[0]
    calls = task.case(1).load_solution()
    serve = [str(target / "bin" / "spreadrl"), "env", "serve", "--tasks", str(tasks_dir)]
    serve += ["--tools", "write_range,inspect_range"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the wheel, not the checkout
    log = tmp_path / "wheel-server.log"
    with _serve(serve, tmp_path, env, log) as url, GenericEnvClient(base_url=url).sync() as client:
        client.reset(task_id=task.id)
        for call in calls:
            action = {
                "type": "call_tool",
                "tool_name": call["name"],
                "arguments": call["arguments"],
            }
            step = client.step(action)
            assert step.observation["ok"], step.observation["text"]
        answer = {"type": "call_tool", "tool_name": "final_answer", "arguments": {"answer": "ok"}}
        end = client.step(answer)
    assert end.done and end.reward == 1.0

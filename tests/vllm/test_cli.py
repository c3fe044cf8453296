"""``spreadrl eval --backend vllm`` and ``spreadrl serve --backend vllm`` as a user runs
them, on vLLM's CPU build: each a process of its own (the CLI's ``__main__`` guard is
what lets vLLM spawn its engine), serve driven by the real ``openai`` client.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.spawn import free_port

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]


def _spreadrl(*args: str) -> list[str]:
    return [sys.executable, "-m", "spreadrl", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def three_tasks(tmp_path_factory) -> Path:
    """Three tasks of the built-in demo-test suite, in their native layout."""
    from spreadrl.data.sources import resolve_tasks

    suite = resolve_tasks("builtin:demo-test")
    src = suite.tasks[0].folder.parent
    out = tmp_path_factory.mktemp("tasks")
    entries = json.loads((src / "dataset.json").read_text())[:3]
    for entry in entries:
        shutil.copytree(src / entry["spreadsheet_path"], out / entry["spreadsheet_path"])
    (out / "dataset.json").write_text(json.dumps(entries))
    return out


def test_eval_with_the_vllm_backend(qwen3_tiny, three_tasks, tmp_path):
    out = tmp_path / "eval"
    args = ["eval", "--backend", "vllm", "--model", str(qwen3_tiny), "--tasks", str(three_tasks)]
    args += ["--out", str(out), "--samples", "2", "--max-turns", "2", "--max-new-tokens", "12"]
    args += ["--preset", "minimal", "--concurrency", "0", "--scheduler", "episode"]
    done = subprocess.run(_spreadrl(*args), env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["backend"] == "vllm"
    trajs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 3 * 2
    for t in trajs:
        # a random model never calls a tool: one turn of up to 12 sampled tokens
        assert t["turns"] >= 1 and 0 < t["generated_tokens"] <= 2 * 12, t
        assert t["error"] in (None, ""), t["error"]
    # the two samples of a case are seeded apart
    by_case = {}
    for t in trajs:
        by_case.setdefault(t["task_id"], []).append(t["messages"][-1]["content"])
    assert any(len(set(v)) == 2 for v in by_case.values())


def _start_serve(model: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """``spreadrl serve --backend vllm`` in a process group of its own (so everything it
    spawns can be found and killed), once its /health answers."""
    import httpx

    port = free_port()
    args = ["serve", "--backend", "vllm", "--model", str(model), "--port", str(port)]
    args += ["--max-model-len", "4096", "--env-workers", "0", "--name", "tiny"]
    with log.open("w") as sink:
        proc = subprocess.Popen(
            _spreadrl(*args),
            env=_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "serve did not come up in 600 s"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            time.sleep(1)
    except BaseException:
        _kill_group(proc)
        raise


def _group(pgid: int) -> list[psutil.Process]:
    """Every live process of the process group ``pgid`` (orphans keep their group)."""
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM serve, then SIGKILL whatever of its group is left: a test never leaves
    an engine process behind, whatever serve did."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture(scope="module")
def server(qwen3_tiny, tmp_path_factory):
    proc, url = _start_serve(qwen3_tiny, tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        yield url
    finally:
        _kill_group(proc)


def test_sigterm_stops_serve_and_its_engine_processes(qwen3_tiny, tmp_path):
    log = tmp_path / "serve.log"
    proc, _ = _start_serve(qwen3_tiny, log)
    try:
        engine = psutil.Process(proc.pid).children(recursive=True)
        # vLLM's CPU build spawns its EngineCore (and it its worker): what must not outlive serve
        assert engine, "serve --backend vllm started no engine process"
        proc.send_signal(signal.SIGTERM)  # to serve alone, as systemd or a user's kill would
        proc.wait(timeout=120)
        # vLLM's shutdown waits up to 5 s for its processes, then kills them: once serve has
        # exited, any engine process still running was orphaned (a bound, not a timing)
        gone, alive = psutil.wait_procs(engine, timeout=30)
        left = [f"{p.pid} {p.name()}" for p in alive] + [
            f"{p.pid} {p.name()}" for p in _group(proc.pid) if p not in alive
        ]
        assert left == [], f"left running after SIGTERM: {left}\n{log.read_text()[-3000:]}"
        # the graceful path, not a crash: uvicorn re-raises the SIGTERM it handled
        assert proc.returncode == -signal.SIGTERM, log.read_text()[-3000:]
        assert "Application shutdown complete" in log.read_text()
    finally:
        _kill_group(proc)


def test_serve_with_the_vllm_backend_answers_the_openai_client(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    chat = [{"role": "user", "content": "Put 42 in A1."}]
    reply = client.chat.completions.create(
        model="tiny", messages=chat, max_tokens=8, temperature=1.0
    )
    assert reply.choices[0].message.role == "assistant"
    assert 0 < reply.usage.completion_tokens <= 8
    assert reply.usage.prompt_tokens > 5
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=chat, max_tokens=8, temperature=1.0, stream=True
        )
    )
    assert chunks and chunks[-1].choices[0].finish_reason in ("stop", "length")

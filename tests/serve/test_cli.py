"""`spreadrl serve` as a user runs it: a real process on the tiny model, stopped with SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
from typer.testing import CliRunner

from tests.spawn import free_port


def test_help_lists_the_flags_and_examples():
    from spreadrl.cli.main import app

    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in (
        "--model",
        "--backend",
        "--max-concurrency",
        "--max-queue",
        "--timeout",
        "--preset",
    ):
        assert flag in result.output
    assert "Examples" in result.output


def test_bad_backend_is_one_clear_error(tiny_model_dir):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "spreadrl",
            "serve",
            "--model",
            str(tiny_model_dir),
            "--backend",
            "gpt",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "--backend must be hf or vllm" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_process_answers_then_stops_cleanly_on_sigterm(tiny_model_dir):
    port = free_port()
    cmd = [sys.executable, "-m", "spreadrl", "serve", "--model", str(tiny_model_dir)]
    cmd += ["--port", str(port), "--name", "tiny", "--log-level", "info"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240  # a hang guard: start-up takes >60 s under load
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "tiny"
        r = httpx.post(
            f"{url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            timeout=60,
        )
        assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = proc.stderr.read() if proc.stderr else ""
    # uvicorn shuts down gracefully, then re-raises the signal it caught, so the exit is -SIGTERM
    assert proc.returncode in (0, -signal.SIGTERM), log
    assert "Application shutdown complete" in log


def test_serve_on_vllm_passes_the_context_to_the_engine(tiny_model_dir, monkeypatch):
    """--max-model-len reaches vllm.LLM (the fake refuses arguments real vLLM 0.33 refuses);
    uvicorn is stubbed: the engine is built before the server would start."""
    import torch

    from spreadrl.cli.main import app
    from spreadrl.serve import listen
    from tests.rollout import fake_vllm

    fake_vllm.install(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    started = []
    monkeypatch.setattr(
        listen, "serve_on", lambda sock, app_, **kw: started.append(sock.getsockname()[1])
    )
    fake_vllm.FakeLLM.instances.clear()
    args = ["serve", "--model", str(tiny_model_dir), "--backend", "vllm", "--port", "0"]
    result = CliRunner().invoke(app, [*args, "--max-model-len", "16384"])
    assert result.exit_code == 0, result.output
    assert len(started) == 1 and started[0] > 0  # served on the socket bound first
    llm = fake_vllm.FakeLLM.instances[-1]
    assert llm.kwargs["max_model_len"] == 16384
    # the engine's processes are stopped when the server returns (here it never started)
    assert llm.llm_engine.engine_core.shutdowns >= 1

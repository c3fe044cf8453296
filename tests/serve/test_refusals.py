"""What the server refuses as vLLM and OpenAI do, and what it names itself (issue 32)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from spreadrl.errors import SpreadrlError
from spreadrl.serve.context import served_model_id
from spreadrl.serve.listen import bind
from tests.serve.conftest import xlsx_bytes

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
LONG = "put the total of column B in B10 " * 40  # ~hundreds of tokens


def _chat(client: TestClient, **extra) -> object:
    body = {"messages": [{"role": "user", "content": LONG}], **extra}
    return client.post("/v1/chat/completions", json=body)


def test_a_prompt_longer_than_the_context_is_a_400_in_openais_shape(app_factory):
    with TestClient(app_factory(context_tokens=64)) as client:
        r = _chat(client, max_tokens=4)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "context_length_exceeded"
    assert "maximum context length is 64 tokens" in err["message"]


def test_asking_for_more_tokens_than_the_context_leaves_is_a_400(app_factory):
    with TestClient(app_factory(context_tokens=4096)) as client:
        fits = _chat(client, max_tokens=4)
        assert fits.status_code == 200, fits.text
        prompt = fits.json()["usage"]["prompt_tokens"]
        r = _chat(client, max_tokens=4096 - prompt + 1)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_an_unknown_preset_on_a_task_is_a_422(app_factory):
    with TestClient(app_factory()) as client:
        upload = {"file": ("book.xlsx", xlsx_bytes(), XLSX)}
        r = client.post("/v1/tasks", files=upload, data={"instruction": "Sum B", "preset": "fulll"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "unknown_preset" and "fulll" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("runs/grpo/final", "grpo"),
        ("runs/grpo", "grpo"),
        ("runs/grpo/checkpoints/step-000040", "grpo-step-000040"),
        ("runs/sft/final/", "sft"),
    ],
)
def test_the_served_model_id_names_the_run(path, expected, tmp_path, monkeypatch):
    (tmp_path / path).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert served_model_id(path) == expected


def test_a_hub_id_is_served_under_its_own_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert served_model_id("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"


def test_a_taken_port_is_one_error_before_the_model_loads_and_no_url(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SpreadrlError, match=f"port {port} on 127.0.0.1 is taken"):
            bind("127.0.0.1", port)
        for argv in (
            # the model folder does not exist: the port is tried first, so the error names it
            ["serve", "--model", str(tmp_path / "no-model"), "--port", str(port)],
            ["view", str(tmp_path), "--port", str(port)],
        ):
            if argv[0] == "view":
                (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
            done = subprocess.run(
                [sys.executable, "-m", "spreadrl", *argv],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 1, done.stdout + done.stderr
            assert f"port {port} on 127.0.0.1 is taken" in done.stderr
            assert "http://" not in done.stdout + done.stderr

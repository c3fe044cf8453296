"""verifiers' own evaluation entry point (vf-eval, verifiers 0.4.0) on the Hub module
integrations/verifiers against `spreadrl env serve`: a scripted OpenAI-compatible
endpoint that replays the reference solution scores 1, a no-op 0, and `spreadrl serve`
with the tiny model runs to a scored end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from spreadrl.data.task import load_tasks
from tests.envs.conftest import ROOT, free_port
from tests.envs.test_versions import claimed_openenv

pytestmark = pytest.mark.envs
MODULE = ROOT / "integrations" / "verifiers"


@contextmanager
def scripted_endpoint(replies: list[str]) -> Iterator[str]:
    """An OpenAI-compatible chat endpoint (streamed, as verifiers asks) that sends
    ``replies[n]`` as the n-th assistant turn of every conversation."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        text = replies[min(turn, len(replies) - 1)]
        head = {"id": uuid.uuid4().hex, "object": "chat.completion.chunk", "created": 0}
        head["model"] = body.get("model", "scripted")
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {
                "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        ]
        lines = [f"data: {json.dumps(head | c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
        return StreamingResponse(iter(lines), media_type="text/event-stream")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def vf_eval(
    tmp: Path, base_url: str, task_id: str, client: str, model: str, taskset: str = ""
) -> dict:
    """Run vf-eval (a subprocess, as a user would) and return the task's rewards; the
    taskset is the Hub module unless ``taskset`` gives another's TOML lines."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "eval.toml"
    taskset = taskset or (
        'id = "spreadrl-spreadsheet-gym"\n'
        f'base_url = "{base_url}"\n'
        f'task_ids = ["{task_id}"]\n'
        "max_turns = 4\n"
    )
    config.write_text(
        f'model = "{model}"\n'
        "[env.taskset]\n"
        f"{taskset}"
        "[env.player.harness]\n"
        'id = "null"\n'  # verifiers' plain chat harness
        "[env.player.runtime]\n"
        'type = "subprocess"\n'
        "[env.player.sampling]\n"
        "max_tokens = 24\n"
    )
    bin_dir = str(Path(sys.executable).parent)  # uv, which verifiers runs its harness with
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(MODULE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "SCRIPTED_KEY": "unused",
    }
    command = [str(Path(bin_dir) / "vf-eval"), "@", str(config), "--no-push"]
    command += ["--client.base-url", client, "--client.api-key-var", "SCRIPTED_KEY"]
    command += ["-o", str(tmp / "out")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces,) = (tmp / "out").glob("*/traces.jsonl")
    (episode,) = [json.loads(line) for line in traces.read_text().splitlines()]
    (trace,) = episode["traces"]
    assert episode["errors"] == [] and trace["errors"] == [], (episode["errors"], trace["errors"])
    return {name: r["score"] for name, r in trace["rewards"].items()}


def test_vf_eval_scores_the_reference_solution_one_and_a_noop_zero(
    openenv_url, tasks_dir, tmp_path
):
    task = load_tasks(tasks_dir).tasks[0]
    oracle = [json.dumps(call) for call in task.case(1).load_solution()]
    with scripted_endpoint([*oracle, json.dumps({"answer": "done"})]) as client:
        rewards = vf_eval(tmp_path / "oracle", openenv_url, task.id, client, "scripted")
    assert rewards == {"checker": 1.0, "tool_calls": 1.0}
    with scripted_endpoint([json.dumps({"answer": "nothing to do"})]) as client:
        rewards = vf_eval(tmp_path / "noop", openenv_url, task.id, client, "scripted")
    assert rewards == {"checker": 0.0, "tool_calls": 0.0}


@contextmanager
def spreadrl_serve(model_dir: Path) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "spreadrl", "serve", "--model", str(model_dir)]
    command += ["--port", str(port), "--name", "tiny"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = model_dir.parent / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(400):
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_vf_eval_with_a_real_tiny_model_behind_spreadrl_serve(
    openenv_url, tasks_dir, tiny_model_dir, tmp_path
):
    """The untrained model writes no valid call: the episode runs out of turns and is
    scored as it stands, by the checker (0)."""
    task = load_tasks(tasks_dir).tasks[1]
    with spreadrl_serve(tiny_model_dir) as client:
        rewards = vf_eval(tmp_path / "tiny", openenv_url, task.id, client, "tiny")
    assert rewards["checker"] == 0.0


def test_verifiers_and_spreadrl_openenv_import_together():
    """verifiers' own openenv extra and spreadrl's, resolved into one venv (this file runs
    in make test-envs' verifiers venv)."""
    import importlib.metadata as metadata

    import spreadrl_spreadsheet_gym  # noqa: F401
    import verifiers
    from verifiers.v1 import Taskset  # noqa: F401

    from spreadrl.integrations.openenv_env import SpreadsheetEnvironment  # noqa: F401

    assert verifiers.__version__.startswith("0.4")
    assert claimed_openenv().specifier.contains(metadata.version("openenv"))


def test_verifiers_own_openenv_taskset_scores_the_reference_solution_one(
    openenv_url, tasks_dir, tmp_path
):
    """verifiers' built-in OpenEnv taskset (id "openenv"), with nothing of spreadrl's
    module: it reads the action schema, and the replies are MCP call_tool actions."""
    task = load_tasks(tasks_dir).tasks[2]
    calls = task.case(1).load_solution()
    replies = [
        json.dumps({"type": "call_tool", "tool_name": c["name"], "arguments": c["arguments"]})
        for c in calls
    ]
    final = {"type": "call_tool", "tool_name": "final_answer", "arguments": {"answer": "ok"}}
    taskset = f'id = "openenv"\nbase_url = "{openenv_url}"\nresets = [{{task_id = "{task.id}"}}]\n'
    with scripted_endpoint([*replies, json.dumps(final)]) as client:
        rewards = vf_eval(tmp_path / "builtin", openenv_url, task.id, client, "scripted", taskset)
    assert rewards == {"openenv_reward": 1.0}

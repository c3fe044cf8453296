"""packages/verifiers-spreadsheet (the taskset `spreadrl-spreadsheet-gym`) under verifiers'
own entry points, vf-validate and vf-eval (verifiers 0.4.0), each run as a user would (a
subprocess). The gym runs in the rollout's tool server, which verifiers starts: nothing
else is started here but the model endpoint. Also verifiers' own OpenEnv taskset against
`spreadrl env serve`, and verifiers beside spreadrl's openenv extra in one venv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from spreadrl.data.task import load_tasks
from tests.envs.conftest import TOOLS
from tests.envs.test_versions import claimed_openenv
from tests.spawn import free_port, serving

pytestmark = pytest.mark.envs
BIN = Path(
    sys.executable
).parent  # vf-eval, vf-validate and uv (verifiers runs its harness with it)


@contextmanager
def scripted_endpoint(replies: list[dict]) -> Iterator[tuple[str, list[dict]]]:
    """An OpenAI-compatible chat endpoint (streamed, as verifiers asks) whose n-th assistant
    turn of every conversation is ``replies[n]``: ``{"content": text}`` or ``{"call": {"name",
    "arguments"}}``, a native tool call. Yields its URL and the request bodies it gets."""
    app = FastAPI()
    requests: list[dict] = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        requests.append(body)
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        reply = replies[min(turn, len(replies) - 1)]
        head = {"id": uuid.uuid4().hex, "object": "chat.completion.chunk", "created": 0}
        head["model"] = body.get("model", "scripted")
        if "call" in reply:
            call = reply["call"]
            function = {"name": call["name"], "arguments": json.dumps(call["arguments"])}
            delta = {"role": "assistant", "tool_calls": [
                {"index": 0, "id": f"call_{turn}", "type": "function", "function": function}
            ]}  # fmt: skip
            finish = "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": reply["content"]}, "stop"
        chunks = [
            {"choices": [{"index": 0, "delta": delta}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        ]  # fmt: skip
        lines = [f"data: {json.dumps(head | c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
        return StreamingResponse(iter(lines), media_type="text/event-stream")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/v1", requests
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _env() -> dict[str, str]:
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "SCRIPTED_KEY": "unused"}


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(
        command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def vf_eval(
    tmp: Path, client: str, model: str, taskset: str, *, max_turns: int = 8, seat: str = ""
) -> dict:
    """Run vf-eval on one task and return its trace (rewards, metrics, stop condition).
    The taskset's own Env brings its harness and runtime; another taskset's ``seat`` gets
    verifiers' plain chat harness on this machine."""
    tmp.mkdir(parents=True, exist_ok=True)
    agent = seat or "agent"
    lines = [f'model = "{model}"', "[env.taskset]", taskset.strip()]
    lines += [f"[env.{agent}]", f"max_turns = {max_turns}"]
    lines += [f"[env.{agent}.sampling]", "max_tokens = 24"]
    if seat:
        lines += [f"[env.{seat}.harness]", 'id = "null"', f"[env.{seat}.runtime]"]
        lines += ['type = "subprocess"']
    (tmp / "eval.toml").write_text("\n".join(lines) + "\n")
    command = [str(BIN / "vf-eval"), "@", "eval.toml", "--no-push", "-n", "1", "-r", "1"]
    command += ["--client.base-url", client, "--client.api-key-var", "SCRIPTED_KEY", "-o", "out"]
    _run(command, tmp)
    (traces,) = (tmp / "out").glob("*/traces.jsonl")
    (episode,) = [json.loads(line) for line in traces.read_text().splitlines()]
    (trace,) = episode["traces"]
    assert episode["errors"] == [] and trace["errors"] == [], (episode["errors"], trace["errors"])
    return trace


def gym_taskset(tasks_dir: Path, task_id: str) -> str:
    tools = json.dumps(TOOLS.split(","))
    return (
        f'id = "spreadrl-spreadsheet-gym"\ntasks = "{tasks_dir}"\ntask_ids = ["{task_id}"]\n'
        f"tools = {tools}\n"
    )


def scores(trace: dict, kind: str = "rewards") -> dict[str, float]:
    return {name: r["score"] if isinstance(r, dict) else r for name, r in trace[kind].items()}


def test_vf_eval_native_tool_calls_replaying_the_reference_solution_score_one(tasks_dir, tmp_path):
    """The model gets the gym's tools as native tools (the request's ``tools``, with the
    gym's schemas); its tool calls reach the gym; a reply without a call ends the episode,
    and spreadrl's checker scores the workbook it left: 1.0, and 0.0 for a no-op."""
    task = load_tasks(tasks_dir).tasks[0]
    calls = task.case(1).load_solution()
    script = [{"call": c} for c in calls] + [{"content": "Done."}]
    with scripted_endpoint(script) as (url, requests):
        trace = vf_eval(tmp_path / "oracle", url, "scripted", gym_taskset(tasks_dir, task.id))
    assert scores(trace) == {"checker": 1.0}
    assert scores(trace, "metrics")["tool_calls"] == len(calls)
    assert scores(trace, "metrics")["tool_errors"] == 0
    tools = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    assert set(tools) == {"write_range", "inspect_range"}
    assert "range" in tools["write_range"]["parameters"]["properties"]
    first = [m for m in requests[0]["messages"] if m["role"] == "user"][0]["content"]
    assert first.startswith(task.instruction) and "Workbook:" in first
    tool_turns = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_turns) == len(calls) and "Error" not in tool_turns[0]["content"]

    with scripted_endpoint([{"content": "Nothing to do."}]) as (url, _):
        trace = vf_eval(tmp_path / "noop", url, "scripted", gym_taskset(tasks_dir, task.id))
    assert scores(trace) == {"checker": 0.0}
    assert scores(trace, "metrics")["tool_calls"] == 0


def test_the_call_that_spends_the_gyms_budget_ends_the_episode_scored(tasks_dir, tmp_path):
    """max_tool_calls 1: the first call spends the gym's budget, the task's @stop ends the
    trajectory before the next model turn, and the workbook is scored as it stands."""
    task = load_tasks(tasks_dir).tasks[0]
    look = {"call": {"name": "inspect_range", "arguments": {"ranges": ["A1:B2"]}}}
    (write,) = [{"call": c} for c in task.case(1).load_solution()][:1]
    taskset = gym_taskset(tasks_dir, task.id) + "max_tool_calls = 1\n"
    with scripted_endpoint([look, write, {"content": "Done."}]) as (url, requests):
        trace = vf_eval(tmp_path / "budget", url, "scripted", taskset)
    assert trace["stop_condition"] == "budget_spent"
    assert len(requests) == 1  # no model turn after the budget was spent
    assert scores(trace, "metrics")["tool_calls"] == 1
    assert scores(trace) == {"checker": 0.0}


def test_vf_validate_gold_replays_the_reference_solutions(tasks_dir, tmp_path):
    """verifiers' gold check (``Task.validate``) replays each case's reference solution on
    the gym, and its no-op check scores the untouched workbook: every task is valid. A task
    whose reference solution is cut short fails the gold check."""
    broken = tmp_path / "tasks"
    shutil.copytree(tasks_dir, broken)
    victim = load_tasks(broken).tasks[1]
    solution = victim.case(1).solution_path
    solution.write_text(json.dumps({"task": victim.id, "case": 1, "calls": []}))
    for name, folder in (("good", tasks_dir), ("broken", broken)):
        command = [str(BIN / "vf-validate"), "spreadrl-spreadsheet-gym"]
        command += ["--taskset.tasks", str(folder), "--taskset.tools", TOOLS]
        command += ["--runtime.type", "subprocess", "-o", "out", "--run.name", name]
        _run(command, tmp_path)
    rows = {}
    for name in ("good", "broken"):
        (results,) = (tmp_path / "out").glob(f"*{name}*/results.jsonl")
        rows[name] = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows["good"]) == 4
    assert all(r["gold"]["reason"] == "valid" for r in rows["good"]), rows["good"]
    assert all(r["noop"]["reason"] == "valid" for r in rows["good"]), rows["good"]
    assert all(r["noop"]["rewards"] == {"checker": 0.0} for r in rows["good"]), rows["good"]
    gold = {r["name"]: r["gold"]["reason"] for r in rows["broken"]}
    assert gold.pop(victim.id) == "invalid"
    assert set(gold.values()) == {"valid"}


@contextmanager
def spreadrl_serve(model_dir: Path) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, "-m", "spreadrl", "serve", "--model", str(model_dir)]
    command += ["--port", str(port), "--name", "tiny"]
    log = model_dir.parent / f"serve-{port}.log"
    with serving(command, port, log=log, timeout_s=240) as url:
        yield f"{url}/v1"


def test_vf_eval_with_a_real_tiny_model_behind_spreadrl_serve(tasks_dir, tiny_model_dir, tmp_path):
    """The untrained model, served under the name vf-eval asks for, writes no valid call:
    the episode ends (a reply without a call, or the turn cap) and the checker scores the
    workbook as it stands (0)."""
    task = load_tasks(tasks_dir).tasks[1]
    with spreadrl_serve(tiny_model_dir) as client:
        trace = vf_eval(
            tmp_path / "tiny", client, "tiny", gym_taskset(tasks_dir, task.id), max_turns=4
        )
    assert scores(trace) == {"checker": 0.0}
    assert trace["ok"] and len(trace["calls"]) >= 1  # the model took turns


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
    module, on `spreadrl env serve`: it reads the action schema, and the replies are MCP
    call_tool actions (JSON text: that taskset plays the user, it passes no native tools)."""
    task = load_tasks(tasks_dir).tasks[2]
    calls = task.case(1).load_solution()
    replies = [
        {
            "content": json.dumps(
                {"type": "call_tool", "tool_name": c["name"], "arguments": c["arguments"]}
            )
        }
        for c in calls
    ]
    final = {"type": "call_tool", "tool_name": "final_answer", "arguments": {"answer": "ok"}}
    taskset = f'id = "openenv"\nbase_url = "{openenv_url}"\nresets = [{{task_id = "{task.id}"}}]\n'
    with scripted_endpoint([*replies, {"content": json.dumps(final)}]) as (url, _):
        trace = vf_eval(tmp_path / "builtin", url, "scripted", taskset, seat="player")
    assert scores(trace) == {"openenv_reward": 1.0}


def test_a_misspelt_tool_is_refused_when_the_taskset_is_configured():
    from spreadrl_spreadsheet_gym import SpreadsheetGymConfig

    assert SpreadsheetGymConfig(tools=TOOLS).tools == TOOLS
    with pytest.raises(ValueError, match="unknown tool or preset 'write_rnage'"):
        SpreadsheetGymConfig(tools="write_range,write_rnage")

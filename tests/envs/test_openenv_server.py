"""spreadrl's gym behind OpenEnv's server as an MCP environment, driven by OpenEnv's own
clients (the generic client, the MCP tool client) and by plain HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from spreadrl.data.task import load_tasks
from tests.envs.conftest import ROOT, TOOLS, env_server

pytestmark = pytest.mark.envs


def _oracle(tasks_dir: Path, index: int) -> tuple[str, list[dict]]:
    task = load_tasks(tasks_dir).tasks[index]
    calls = task.case(1).load_solution()
    assert calls, "the synthesized task has a reference solution"
    return task.id, calls


def _call(name: str, arguments: object) -> dict:
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


def _answer(text: str) -> dict:
    return _call("final_answer", {"answer": text})


def test_mcp_tools_oracle_scores_one_and_noop_zero(openenv_url, tasks_dir):
    from openenv.core.generic_client import GenericEnvClient

    task_id, calls = _oracle(tasks_dir, 0)
    with GenericEnvClient(base_url=openenv_url).sync() as env:
        first = env.reset(task_id=task_id)
        assert not first.done and first.observation["instruction"]
        listed = env.step({"type": "list_tools"}).observation["tools"]
        schemas = {s["function"]["name"]: s for s in first.observation["tool_schemas"]}
        assert [t["name"] for t in listed] == ["write_range", "inspect_range", "final_answer"]
        for tool in listed[:2]:  # the gym's own JSON schemas, unchanged
            assert tool["input_schema"] == schemas[tool["name"]]["function"]["parameters"]
        for call in calls:
            step = env.step(_call(call["name"], call["arguments"]))
            assert step.observation["ok"], step.observation["text"]
            assert step.observation["result"]["is_error"] is False
            assert not step.done and step.reward is None
        state = env.state()
        assert (state["task_id"], state["tool_calls"], state["end_reason"]) == (
            task_id,
            len(calls),
            None,
        )
        end = env.step(_answer("done"))
        assert end.done and end.reward == 1.0
        assert env.state()["end_reason"] == "answered"

        env.reset(task_id=task_id)  # the same session, a fresh copy of the workbook
        noop = env.step(_answer("I did nothing"))
        assert noop.done and noop.reward == 0.0
        assert noop.observation["info"]["mismatches"]


def test_malformed_actions_of_any_shape_get_error_observations(openenv_url, tasks_dir):
    from openenv.core.generic_client import GenericEnvClient

    task_id, calls = _oracle(tasks_dir, 1)
    rejected = [  # refused before any tool runs
        {"type": "call_tool", "tool_name": "write_range", "arguments": '{"range": "B2"'},
        {"type": "call_tool", "tool_name": 12, "arguments": {}},
        {"type": "call_tool", "tool_name": "write_range", "arguments": [1, 2]},
        {"type": "teleport"},
        {"type": "call_tool", "tool_name": "inspect_range", "bogus": 1},
        {"arguments": {"range": "A1"}},
        {},
    ]
    failed = [  # reach the gym, which answers with an error
        _call("no_such_tool", {}),
        _call("write_range", {"range": 12}),
    ]
    with GenericEnvClient(base_url=openenv_url).sync() as env:
        env.reset(task_id=task_id)
        for action in [*rejected, *failed]:
            step = env.step(action)
            assert not step.done and not step.observation["ok"], action
            assert step.observation["text"].startswith("Error"), action
        # arguments as JSON text, as OpenAI-style clients send them
        for call in calls:
            step = env.step(_call(call["name"], json.dumps(call["arguments"])))
            assert step.observation["ok"], step.observation["text"]
        state = env.state()
        assert state["rejected_actions"] == len(rejected)
        end = env.step(_answer("done"))
        assert end.reward == 1.0
        info, state = end.observation["info"], env.state()
        assert state["tool_errors"] == info["tool_errors"] == len(failed)
        assert state["tool_calls"] == info["tool_calls"] == len(failed) + len(calls)


def test_the_deprecated_action_shape_still_scores(openenv_url, tasks_dir):
    from spreadrl.integrations.openenv_client import SpreadsheetEnvClient
    from spreadrl.integrations.openenv_env import SpreadsheetAction

    task_id, calls = _oracle(tasks_dir, 3)
    with SpreadsheetEnvClient(base_url=openenv_url).sync() as env:
        env.reset(task_id=task_id)
        for call in calls:
            step = env.step(SpreadsheetAction(name=call["name"], arguments=call["arguments"]))
            assert step.observation.ok, step.observation.text
        assert env.step(SpreadsheetAction(answer="done")).reward == 1.0


def test_concurrent_sessions_stay_isolated(openenv_url, tasks_dir):
    """Two sessions on the same task, interleaved by events (not by sleeps): the idler
    answers after the solver has written its solution into its own copy, and the solver
    answers after the idler has been scored; only the solver scores 1."""
    from openenv.core.generic_client import GenericEnvClient

    task_id, calls = _oracle(tasks_dir, 2)

    async def pair() -> tuple[float, float]:
        both_reset = asyncio.Barrier(2)
        written, idler_scored = asyncio.Event(), asyncio.Event()

        async def solver() -> float:
            async with GenericEnvClient(base_url=openenv_url) as env:
                await env.reset(task_id=task_id)
                await both_reset.wait()
                for call in calls:
                    await env.step(_call(call["name"], call["arguments"]))
                written.set()
                await idler_scored.wait()
                return (await env.step(_answer("done"))).reward

        async def idler() -> float:
            async with GenericEnvClient(base_url=openenv_url) as env:
                await env.reset(task_id=task_id)
                await both_reset.wait()
                await written.wait()
                reward = (await env.step(_answer("nothing"))).reward
                idler_scored.set()
                return reward

        return tuple(await asyncio.wait_for(asyncio.gather(solver(), idler()), 120))

    async def twice() -> list[tuple[float, float]]:
        return list(await asyncio.gather(pair(), pair()))

    assert asyncio.run(twice()) == [(1.0, 0.0), (1.0, 0.0)]


def test_reset_without_a_task_walks_the_set(openenv_url, tasks_dir):
    from openenv.core.generic_client import GenericEnvClient

    ids = {t.id for t in load_tasks(tasks_dir)}
    with GenericEnvClient(base_url=openenv_url).sync() as env:
        seen = {env.reset().observation["info"]["task_id"] for _ in range(len(ids))}
        by_seed = [env.reset(seed=5).observation["info"]["task_id"] for _ in range(2)]
    assert seen == ids
    assert by_seed[0] == by_seed[1]


def test_an_unknown_task_is_a_404_with_one_line_and_no_server_path(openenv_url, tasks_dir):
    from openenv.core.generic_client import GenericEnvClient

    reply = httpx.post(f"{openenv_url}/reset", json={"task_id": "nope"}, timeout=30)
    assert reply.status_code == 404, reply.text
    detail = reply.json()["detail"]
    assert detail == "unknown task_id 'nope': not in the served set"
    with GenericEnvClient(base_url=openenv_url).sync() as env:
        with pytest.raises(RuntimeError) as raised:
            env.reset(task_id="nope")
        assert "unknown task_id 'nope'" in str(raised.value)
        assert str(tasks_dir) not in str(raised.value) and "/tmp" not in str(raised.value)
        assert env.reset().observation["info"]["task_id"]  # the session goes on


def test_metadata_names_describes_and_versions_the_environment(openenv_url):
    from spreadrl import __version__

    meta = httpx.get(f"{openenv_url}/metadata", timeout=30).json()
    assert meta["name"] == "spreadrl-spreadsheet"
    assert "Spreadsheet Gym" in meta["description"]
    assert meta["version"] == __version__
    assert meta["readme_content"].lstrip().startswith("---")
    assert "final_answer" in meta["readme_content"]


def test_a_misspelt_tool_is_one_line_at_start_up(tasks_dir):
    done = subprocess.run(
        [sys.executable, "-m", "spreadrl", "env", "serve", "--tasks", str(tasks_dir)]
        + ["--tools", "write_rnage", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # a SpreadrlError's exit status
    (line,) = (done.stdout + done.stderr).strip().splitlines()
    assert line.startswith("error: unknown tool or preset 'write_rnage' in env tools")


def test_openenv_mcp_tool_client_lists_and_calls_the_gyms_tools(openenv_url, tasks_dir):
    """OpenEnv's MCP client (production mode: tools on /mcp, reset over its session)."""
    from openenv.core.mcp_client import MCPToolClient

    task_id, calls = _oracle(tasks_dir, 0)

    async def episode() -> tuple[list[str], list[str], str]:
        async with MCPToolClient(base_url=openenv_url) as env:
            names = [t.name for t in await env.list_tools()]
            await env.reset(task_id=task_id)
            texts = [await env.call_tool(c["name"], **c["arguments"]) for c in calls]
            end = await env.call_tool("final_answer", answer="done")
            return names, texts, end

    names, texts, end = asyncio.run(episode())
    assert names == ["write_range", "inspect_range", "final_answer"]
    assert all("Error" not in str(text) for text in texts), texts
    assert str(end) == "reward 1"


def test_closing_sessions_logs_no_traceback(openenv_url, tasks_dir):
    from openenv.core.generic_client import GenericEnvClient

    task_id, _ = _oracle(tasks_dir, 0)
    for finish in (True, False):  # an episode scored, and one left open at close
        with GenericEnvClient(base_url=openenv_url).sync() as env:
            env.reset(task_id=task_id)
            if finish:
                env.step(_answer("done"))
    port = openenv_url.rsplit(":", 1)[1]
    log = (tasks_dir.parent / f"env-serve-{port}.log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_production_mode_serves_the_tools_over_a_users_own_workbook(tmp_path):
    """`env serve --workbook`: OpenEnv's MCP client writes a formula into a real .xlsx,
    recalculates it through the gym, and the file on disk holds the edit."""
    import openpyxl
    from openenv.core.mcp_client import MCPToolClient

    book = tmp_path / "book.xlsx"
    wb = openpyxl.Workbook()
    wb.active.title = "Data"
    wb.active["A1"], wb.active["A2"] = 2, 3
    wb.save(book)

    async def session(url: str) -> tuple[list[str], str, str]:
        async with MCPToolClient(base_url=url) as env:
            names = [t.name for t in await env.list_tools()]
            wrote = await env.call_tool("write_range", range="Data!A3", values=[["=A1+A2"]])
            value = await env.call_tool("recalculate_and_read", ranges=["Data!A3"])
            return names, wrote, value

    tools = "write_range,inspect_range,recalculate_and_read"
    with env_server(None, "--workbook", str(book), tools=tools, log_dir=tmp_path) as url:
        names, wrote, value = asyncio.run(session(url))
        assert openpyxl.load_workbook(book)["Data"]["A3"].value == "=A1+A2"
        reset = httpx.post(f"{url}/reset", json={}, timeout=30).json()["observation"]
    assert names == ["write_range", "inspect_range", "recalculate_and_read"]  # no final_answer
    assert "Error" not in wrote
    assert "5" in value, value
    assert reset["info"] == {"workbook": "book.xlsx", "mode": "production"}


def test_production_mode_answers_the_mcp_packages_own_client(tmp_path):
    """MCP's reference client (the `mcp` package: streamable HTTP, initialize first) lists
    the tools with the gym's schemas and edits the workbook on disk."""
    import openpyxl
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from spreadrl.env.spreadsheet.tools import tool_schemas

    book = tmp_path / "book.xlsx"
    wb = openpyxl.Workbook()
    wb.active.title = "Data"
    wb.active["A1"] = 7
    wb.save(book)

    async def session(url: str) -> tuple[dict, str, bool]:
        async with streamable_http_client(f"{url}/mcp") as streams:  # mcp 1.x: 3, 2.x: 2
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                # by MCP's wire names: mcp 2.x renamed the attributes (input_schema)
                tools = [t.model_dump(by_alias=True) for t in (await mcp.list_tools()).tools]
                listed = {t["name"]: t["inputSchema"] for t in tools}
                wrote = await mcp.call_tool(
                    "write_range", {"range": "Data!B1", "values": [["=A1*6"]]}
                )
                bad = await mcp.call_tool("write_range", {"range": 12})
                bad_error = bad.model_dump(by_alias=True)["isError"]
                return listed, wrote.content[0].text, bad_error

    with env_server(None, "--workbook", str(book), log_dir=tmp_path) as url:
        listed, wrote, bad_is_error = asyncio.run(session(url))
    expected = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas(TOOLS)}
    assert listed == expected
    assert "Error" not in wrote and bad_is_error
    assert openpyxl.load_workbook(book)["Data"]["B1"].value == "=A1*6"

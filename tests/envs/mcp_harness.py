"""Harnesses that use the gym's tools over MCP (``rollout.harness_mcp``), for
tests/envs/test_harness_mcp.py. Run in the sandbox, not imported by the tests; a check
that fails raises, which ends the episode as an error with the message."""

import asyncio

import httpx
from fastmcp import Client

LISTED = ["inspect_range", "write_range"]  # env.tools of the test, sorted


async def _session(mcp_url, calls):
    """The tools listed (OpenAI function schemas) and each call's (text, is_error)."""
    async with Client(mcp_url) as mcp:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.inputSchema,
                },
            }
            for tool in await mcp.list_tools()
        ]
        results = []
        for name, arguments in calls:
            result = await mcp.call_tool(name, arguments, raise_on_error=False)
            results.append((result.content[0].text, result.is_error))
    return tools, results


def _ask(base_url, model, instruction, tools):
    """One model call offering the listed tools (an episode must call the model)."""
    with httpx.Client(base_url=base_url, timeout=60) as client:
        messages = [{"role": "user", "content": instruction}]
        reply = client.post(
            "/chat/completions", json={"model": model, "messages": messages, "tools": tools}
        )
        reply.raise_for_status()


def write_answer(instruction, workbook, base_url, model, mcp_url):
    """List the tools, send them to the model, write to a missing sheet (a tool error),
    then the answer (42 in A1)."""
    calls = [
        ("write_range", {"range": "Nope!A1", "values": 1}),
        ("write_range", {"range": "A1", "values": 42}),
    ]
    tools, results = asyncio.run(_session(mcp_url, calls))
    names = sorted(tool["function"]["name"] for tool in tools)
    if names != LISTED:
        raise AssertionError(f"the MCP server listed {names}, not {LISTED}")
    _ask(base_url, model, instruction, tools)
    (_, bad_failed), (text, good_failed) = results
    if not bad_failed or good_failed:
        raise AssertionError(f"unexpected tool results: {results}")


def outside_paths(instruction, workbook, base_url, model, mcp_url):
    """The spreadsheet-rl preset's path argument naming files outside the episode
    folder: each call is a tool error, and nothing is written there."""
    outside = ["../../escaped.xlsx", "/tmp/escaped.xlsx", "../" + workbook.rsplit("/", 1)[-1]]
    calls = [("write_range", {"path": path, "range": "A1", "data": 1}) for path in outside]
    _, results = asyncio.run(_session(mcp_url, calls))
    _ask(base_url, model, instruction, [])
    for path, (text, failed) in zip(outside, results, strict=True):
        if not failed or "path" not in text:
            raise AssertionError(f"path {path!r} was not refused: {text}")

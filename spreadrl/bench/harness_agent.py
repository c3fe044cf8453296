"""The built-in loop's work as a harness, for ``spreadrl bench rollout --against harness``.

Run in the sandbox by the capturing endpoint's episodes (``rollout.harness =
spreadrl.bench.harness_agent:run``), never imported by spreadrl itself: it opens the
gym on the workbook it is given (the bench's tool preset), sends the built-in loop's
opening (the recipe's system prompt, the instruction and the workbook overview) and
tools, runs each tool call in the gym and sends the results back, until the model
answers without a call or the endpoint refuses (the episode's budget). So the bench
compares the same episodes' work with and without the endpoint between policy and tools.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx

from spreadrl.data.task import CELL_LEVEL, Task, TaskCase
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.env.types import ToolCall
from spreadrl.rollout.config import DEFAULT_SYSTEM_PROMPT


def run(
    instruction: str,
    workbook: str,
    base_url: str,
    model: str,
    preset: str = "write_range",
    env_config: EnvConfig | None = None,
) -> None:
    """Play one episode against ``base_url`` with the gym's tools on ``workbook``."""
    path = Path(workbook)
    task = Task("bench", instruction, CELL_LEVEL, "A1", (TaskCase(1, path, path),), path.parent)
    env = SpreadsheetEnv(env_config or EnvConfig(tools=preset))
    obs = env.reset(task)
    user = f"{instruction}\n\n{obs.workbook_overview}" if obs.workbook_overview else instruction
    messages = [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": user},
    ]
    # plain http on loopback: no TLS context to build (0.1-0.2 s of CPU per client with
    # certificate loading), which is the agent's cost, not the endpoint's
    with httpx.Client(base_url=base_url, timeout=600, verify=False) as client:
        while True:
            body = {"model": model, "messages": messages, "tools": obs.tool_schemas}
            reply = client.post("/chat/completions", json=body)
            if reply.status_code == 429:  # the episode's budget is spent
                break
            reply.raise_for_status()
            message = reply.json()["choices"][0]["message"]
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                break
            for call in calls:
                args = json.loads(call["function"]["arguments"] or "{}")
                result = env.step(ToolCall(call["function"]["name"], args))
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": result.observation}
                )
    shutil.copyfile(env.ctx.book.save(), path)
    env.close()


def demo(instruction: str, workbook: str, base_url: str, model: str) -> None:
    """The CPU demo's episode as a harness: the env section of the demo's recipe
    (``configs/tiny-cpu.yaml``: ``write_range``, no workbook overview, 2 tool calls)."""
    env = EnvConfig(tools=["write_range"], overview="none", max_tool_calls=2)
    run(instruction, workbook, base_url, model, env_config=env)

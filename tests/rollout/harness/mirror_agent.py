"""A harness that sends the built-in loop's prompts: FakePool's opening, tools and observations.

Run by tests in the sandbox (not imported by them): each behaviour the fault tests
need is a function of its own."""

import json
import os
import subprocess
import time

import httpx

SYSTEM = (
    "You are a spreadsheet agent. A workbook is open for you to edit with the tools below. "
    "Call one tool at a time. When the task is done, reply with a short final answer "
    "and no tool call."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_range",
            "description": "Write values into a range.",
            "parameters": {"type": "object", "properties": {"range": {"type": "string"}}},
        },
    }
]


def run(instruction, workbook, base_url, model, edit=False):
    """FakePool's episode: opening, tool results as FakePool.step writes them; with
    ``edit`` each reply is sent back with its content changed (a re-rendered history)."""
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{instruction}\n\nSheet1: A1:B2"},
    ]
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for _ in range(16):
            reply = client.post(
                "/chat/completions", json={"model": model, "messages": messages, "tools": TOOLS}
            )
            if reply.status_code == 429:  # the episode's budget is spent
                return
            if reply.status_code != 200:
                raise RuntimeError(f"{reply.status_code}: {reply.text}")
            message = reply.json()["choices"][0]["message"]
            if edit:
                message = {**message, "content": "(edited) " + (message.get("content") or "")}
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                text = "wrote" if "values" in args else "Error: values missing"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})


def edited(instruction, workbook, base_url, model):
    run(instruction, workbook, base_url, model, edit=True)


def crash(instruction, workbook, base_url, model):
    raise RuntimeError("the harness fell over")


def hang(instruction, workbook, base_url, model):
    time.sleep(3600)


def flood(instruction, workbook, base_url, model):
    messages = [{"role": "user", "content": instruction}]
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for _ in range(200):
            client.post("/chat/completions", json={"model": model, "messages": messages})


def write_outside(instruction, workbook, base_url, model):
    run(instruction, workbook, base_url, model)
    with open(os.path.join(os.path.dirname(workbook), "..", "escaped.txt"), "w") as fh:
        fh.write("escaped")


def shell_writes_outside(instruction, workbook, base_url, model):
    """Plays the episode, then has a program it starts write beside its folder (into the
    folder that holds it: the fork server's own, or the episodes' root) and into a
    sibling's name; raises when either write got through."""
    run(instruction, workbook, base_url, model)
    here = os.path.dirname(os.path.realpath(workbook))
    targets = [os.path.join(here, "..", "escaped-sh.txt"), here + "-sibling.txt"]
    for target in targets:
        subprocess.run(["sh", "-c", f"echo escaped > '{target}'"], stderr=subprocess.DEVNULL)
    escaped = [t for t in targets if os.path.exists(t)]
    if escaped:
        raise RuntimeError(f"a started program wrote outside the folder: {escaped}")
    if os.environ.get("SPREADRL_LANDLOCK") != "1":
        raise RuntimeError("the episode ran without Landlock")


def silent(instruction, workbook, base_url, model):
    """Never calls the model."""

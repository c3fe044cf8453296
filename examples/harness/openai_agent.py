"""A spreadsheet agent spreadrl did not write: the openai client, two openpyxl tools, its own prompt.

Nothing here imports spreadrl. Train it (docs/harness.md):

    spreadrl grpo --config configs/tiny-cpu.yaml rollout.harness=examples/harness/openai_agent.py:run
"""

import json
import os

import openai
from openpyxl import load_workbook

PROMPT = (
    "You edit an Excel workbook with two tools. Read the cells you need, write the "
    "result where the task asks, then reply DONE with no tool call."
)
RANGE = {"type": "string", "description": "e.g. Sheet1!A1:C5 or B2"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_cells",
            "description": "Values of a range, row by row.",
            "parameters": {"type": "object", "properties": {"range": RANGE}, "required": ["range"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_cells",
            "description": "Write rows of values from a top-left cell.",
            "parameters": {
                "type": "object",
                "required": ["start", "values"],
                "properties": {
                    "start": RANGE,
                    "values": {"type": "array", "items": {"type": "array"}},
                },
            },
        },
    },
]


def _sheet(book, ref):
    sheet, _, cells = ref.rpartition("!")
    return (book[sheet.strip("'")] if sheet else book.active), cells


def read_cells(path, range):
    sheet, cells = _sheet(load_workbook(path), range)
    rows = sheet[cells] if ":" in cells else ((sheet[cells],),)
    return json.dumps([[cell.value for cell in row] for row in rows], default=str)


def write_cells(path, start, values):
    book = load_workbook(path)
    sheet, cell = _sheet(book, start)
    top = sheet[cell]
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            sheet.cell(top.row + i, top.column + j, value)
    book.save(path)
    return f"wrote {sum(len(row) for row in values)} cells"


def run(instruction, workbook, base_url, model, max_turns=8):
    client = openai.OpenAI(base_url=base_url, api_key="unused")
    messages = [{"role": "system", "content": PROMPT}, {"role": "user", "content": instruction}]
    tools = {"read_cells": read_cells, "write_cells": write_cells}
    for _ in range(max_turns):
        try:
            reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        except openai.RateLimitError:  # the trainer's budget for this episode is spent
            return
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return
        for call in message.tool_calls:
            try:
                result = tools[call.function.name](workbook, **json.loads(call.function.arguments))
            except Exception as exc:  # the model's mistake: tell it, as any agent would
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":  # the same agent as a command: rollout.harness="python agent.py"
    env = os.environ
    run(
        env["SPREADRL_INSTRUCTION"],
        env["SPREADRL_WORKBOOK"],
        env["OPENAI_BASE_URL"],
        env["SPREADRL_MODEL"],
    )

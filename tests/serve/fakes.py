"""A scripted token-level policy and a small workbook pool, for deterministic task-endpoint tests.

The pool edits real .xlsx files with openpyxl through one ``write_cell`` tool
and saves the output where the agent loop asks, as the gym's pools do.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spreadrl.env.types import EpisodeResult, Observation, StepResult
from spreadrl.rollout.types import PolicyTurn

WRITE_CELL = {
    "type": "function",
    "function": {
        "name": "write_cell",
        "description": "Write one value into one cell of the first sheet.",
        "parameters": {
            "type": "object",
            "properties": {"cell": {"type": "string"}, "value": {}},
            "required": ["cell", "value"],
        },
    },
}


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class ScriptedPolicy:
    """Says the given assistant turns in order (as token ids), then a final answer."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, tokenizer: Any, turns: list[str]) -> None:
        self.tokenizer = tokenizer
        self.turns = list(turns)

    def act(self, contexts, params, *, seeds=None):
        out = []
        for _ in contexts:
            text = self.turns.pop(0) if self.turns else "Done."
            ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
            out.append(PolicyTurn(text=text, token_ids=ids, logprobs=[0.0] * len(ids)))
        return out


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class WorkbookPool:
    """reset/step/finish over openpyxl workbooks; records the presets it was opened with."""

    def __init__(self) -> None:
        self.books: dict[str, Any] = {}

    def reset(self, episode_id, task, case):
        import openpyxl

        self.books[episode_id] = openpyxl.load_workbook(task.case(case).input_path)
        return _done(Observation(task.instruction, "Sheet1: A1:B4", [WRITE_CELL]))

    def step(self, episode_id, call):
        ws = self.books[episode_id].worksheets[0]
        cell, value = call.arguments.get("cell"), call.arguments.get("value")
        if not isinstance(cell, str):
            return _done(StepResult("Error: 'cell' must be a cell reference like C1", ok=False))
        ws[cell] = value
        return _done(StepResult(f"wrote {value!r} to {cell}", ok=True))

    def finish(self, episode_id, output_path=None, **kwargs):
        book = self.books.pop(episode_id)
        if output_path is not None:
            Path(output_path).parent.mkdir(parents=True, exist_ok=True)
            book.save(output_path)
        return _done(EpisodeResult(0.0, False, [], 0, 0, "answered", output_path=output_path))


def workbook_pool_factory(presets: list[str] | None = None):
    """A pool factory for create_app; appends each requested preset to ``presets``."""

    @contextmanager
    def factory(preset: str):
        if presets is not None:
            presets.append(preset)
        yield WorkbookPool()

    return factory

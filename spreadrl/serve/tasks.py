"""The task endpoint's work: check an upload, run the agent on it in the gym, diff the result.

An uploaded workbook becomes a one-case :class:`~spreadrl.data.task.Task` in
its own folder (the input doubles as the "answer": serving has no reference,
so the reward is meaningless and ignored), the shared agent loop
(:func:`~spreadrl.rollout.runner.run_episodes`) runs it with the outputs kept,
and the edited workbook is compared with the upload cell by cell.
"""

from __future__ import annotations

import io
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spreadrl.archive_gate import WorkbookRefused, check_archive
from spreadrl.errors import SpreadrlError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from spreadrl.data.task import Task
    from spreadrl.env.types import EpisodeResult, Observation, StepResult, ToolCall
    from spreadrl.rollout.chat import EpisodeChat
    from spreadrl.rollout.episode import EnvPoolLike
    from spreadrl.rollout.policy import Policy

log = logging.getLogger(__name__)

PoolFactory = Callable[[str], AbstractContextManager[Any]]
MAX_CHANGED_CELLS = 500
MAX_PROGRESS_CHARS = 2000  # of each observation in the progress view
_ZIP_MAGIC = b"PK\x03\x04"


class UploadError(SpreadrlError):
    """A bad upload; ``status`` is the HTTP code to answer with (400 or 422)."""

    def __init__(self, message: str, status: int = 400, code: str = "bad_upload") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def check_upload(filename: str | None, data: bytes) -> None:
    """Reject what is not a readable .xlsx, saying what is wrong with it."""
    import openpyxl

    name = filename or "(unnamed upload)"
    if not data:
        raise UploadError(f"{name}: the uploaded file is empty", 400, "empty_file")
    if not name.lower().endswith((".xlsx", ".xlsm")):
        raise UploadError(
            f"{name}: not an .xlsx workbook (upload an Excel 2007+ .xlsx file)", 400, "not_xlsx"
        )
    if not data.startswith(_ZIP_MAGIC):
        raise UploadError(
            f"{name}: not an .xlsx workbook (an .xlsx file is a zip archive; this one is not)",
            400,
            "not_xlsx",
        )
    try:
        check_archive(data, name=name)
    except WorkbookRefused as exc:  # 413 for a workbook too large, 422 for a lying archive
        raise UploadError(str(exc), exc.status, "workbook_refused") from exc
    try:
        openpyxl.load_workbook(io.BytesIO(data)).close()
    except Exception as exc:  # openpyxl raises many types for broken files
        raise UploadError(
            f"{name}: corrupt workbook, openpyxl cannot read it ({type(exc).__name__}: {exc})",
            422,
            "corrupt_workbook",
        ) from exc


class TaskStore:
    """Folders of served tasks under one root; only the newest ``keep`` are kept."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = max(1, keep)
        self._order: list[str] = []
        self._lock = threading.Lock()
        root.mkdir(parents=True, exist_ok=True)

    def new(self) -> tuple[str, Path]:
        task_id = uuid.uuid4().hex[:16]
        folder = self.root / task_id
        folder.mkdir()
        with self._lock:
            self._order.append(task_id)
            stale, self._order = self._order[: -self.keep], self._order[-self.keep :]
        for old in stale:
            shutil.rmtree(self.root / old, ignore_errors=True)
        return task_id, folder

    def output_path(self, task_id: str) -> Path | None:
        if not task_id.isalnum():
            return None
        path = self.root / task_id / "out" / f"1_{task_id}_output.xlsx"
        return path if path.is_file() else None


@dataclass(frozen=True)
class TaskRequest:
    instruction: str
    max_turns: int
    preset: str
    temperature: float
    max_tokens: int
    timeout_s: float


def run_task(
    policy: Policy,
    chat: EpisodeChat | None,
    pool_factory: PoolFactory,
    store: TaskStore,
    upload: bytes,
    request: TaskRequest,
    max_response_tokens: int,
    progress: TaskProgress | None = None,
) -> dict[str, Any]:
    """Run the agent on the uploaded workbook; blocking (call it from a worker thread).

    ``progress`` (optional) receives each tool call and its result as they happen,
    for the page's progress view."""
    from spreadrl.data.task import CELL_LEVEL, Task, TaskCase
    from spreadrl.rollout.config import RolloutConfig
    from spreadrl.rollout.runner import EpisodeJob, RunValues, run_episodes

    task_id, folder = store.new()
    input_path = folder / f"1_{task_id}_input.xlsx"
    answer_path = folder / f"1_{task_id}_answer.xlsx"
    input_path.write_bytes(upload)
    answer_path.write_bytes(upload)
    task = Task(
        id=task_id,
        instruction=request.instruction,
        instruction_type=CELL_LEVEL,
        answer_position="A1",
        cases=(TaskCase(1, input_path, answer_path),),
        folder=folder,
        source="upload",
    )
    # the rollout section's defaults, but for what the request and the server say
    cfg = RolloutConfig(
        temperature=request.temperature,
        max_new_tokens_per_turn=request.max_tokens,
        max_turns=request.max_turns,
        max_response_tokens=max_response_tokens,
        episode_wall_time_s=request.timeout_s,
    )
    run = RunValues(keep_outputs_dir=str(folder / "out"))
    try:
        with pool_factory(request.preset) as pool:
            if progress is not None:
                pool = ProgressPool(pool, progress)
            batch = run_episodes(policy, pool, [EpisodeJob(task)], cfg, chat, run=run)
    finally:
        if progress is not None:
            progress.finish()
    traj = batch.trajectories[0]
    output = store.output_path(task_id)
    changes = changed_cells(input_path, output) if output is not None else None
    return {
        "id": task_id,
        "instruction": request.instruction,
        "stop_reason": traj.stop_reason,
        "error": traj.error,
        "turns": traj.turns,
        "tool_calls": traj.tool_calls,
        "tool_errors": traj.tool_errors,
        "parse_errors": traj.parse_errors,
        "messages": traj.messages,
        "steps": steps_of(traj.messages, traj.metadata.get("assistant_turns")),
        "cell_changes": traj.metadata.get("cell_changes", {}),
        "assistant_turns": traj.metadata.get("assistant_turns", {}),
        "changes": changes,
        "output_url": f"/v1/tasks/{task_id}/output.xlsx" if output is not None else None,
        "timings": {k: round(v, 4) for k, v in batch.timings.items()},
    }


def steps_of(
    messages: list[dict[str, Any]], turns: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The agent's steps for display: each assistant turn with its parsed call and the observation.

    ``turns``: the rollout's own reading of each assistant message
    (``metadata.assistant_turns``, split with the template's markers); messages without
    one are parsed here with the default markers."""
    from spreadrl.rollout.parsing import parse_assistant_turn

    steps: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            known = (turns or {}).get(str(index))
            if known is None:
                parsed = parse_assistant_turn(message["content"], None, max_calls=64)
                known = {
                    "content": parsed.content,
                    "reasoning_content": message.get("reasoning_content") or parsed.reasoning,
                    "tool_calls": [c.to_json() for c in parsed.tool_calls],
                    "errors": parsed.errors,
                }
            steps.append(
                {
                    "text": known["content"],
                    "reasoning": known["reasoning_content"],
                    "tool_calls": known["tool_calls"],
                    "errors": known["errors"],
                    "observations": [],
                }
            )
        elif message["role"] == "tool" and steps:
            steps[-1]["observations"].append(message["content"])
    return steps


def _cell_value(value: object) -> str | int | float | bool | None:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def changed_cells(before: Path, after: Path, limit: int = MAX_CHANGED_CELLS) -> dict[str, Any]:
    """Cells whose stored value (formula text for formulas) differs, plus added/removed sheets."""
    import openpyxl

    for path in (before, after):
        check_archive(path)
    old = openpyxl.load_workbook(before)
    new = openpyxl.load_workbook(after)
    try:
        old_names, new_names = old.sheetnames, new.sheetnames
        cells: list[dict[str, Any]] = []
        total = 0
        for name in new_names:
            new_ws = new[name]
            old_ws = old[name] if name in old_names else None
            coords = {c.coordinate for row in new_ws.iter_rows() for c in row}
            if old_ws is not None:
                coords |= {c.coordinate for row in old_ws.iter_rows() for c in row}
            for coord in sorted(coords, key=_coord_key):
                before_v = _cell_value(old_ws[coord].value) if old_ws is not None else None
                after_v = _cell_value(new_ws[coord].value)
                if before_v != after_v:
                    total += 1
                    if len(cells) < limit:
                        cells.append(
                            {"sheet": name, "cell": coord, "before": before_v, "after": after_v}
                        )
        return {
            "cells": cells,
            "total": total,
            "truncated": total > len(cells),
            "sheets_added": [n for n in new_names if n not in old_names],
            "sheets_removed": [n for n in old_names if n not in new_names],
        }
    finally:
        old.close()
        new.close()


def _coord_key(coord: str) -> tuple[int, int]:
    from openpyxl.utils.cell import column_index_from_string, coordinate_from_string

    col, row = coordinate_from_string(coord)
    return row, column_index_from_string(col)


class TaskProgress:
    """What a running task has done so far, polled by the page (``GET /v1/tasks/progress/ID``).

    Events are appended from the agent loop's thread and from tool futures'
    callbacks; reads take a copy under the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self._done = False

    def call(self, call: ToolCall) -> int:
        with self._lock:
            self._events.append({"call": call.to_json(), "observation": None, "ok": None})
            return len(self._events) - 1

    def result(self, index: int, result: StepResult) -> None:
        with self._lock:
            event = self._events[index]
            event["observation"] = result.observation[:MAX_PROGRESS_CHARS]
            event["ok"] = result.ok
            if result.info.get("changed_cells"):
                event["changed_cells"] = result.info["changed_cells"]

    def finish(self) -> None:
        with self._lock:
            self._done = True

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "status": "done" if self._done else "running",
                "elapsed_s": round(time.monotonic() - self._started, 2),
                "events": [dict(e) for e in self._events],
            }


class ProgressStore:
    """Progress records by client-chosen id; only the newest ``keep`` are kept."""

    ID = re.compile(r"[0-9a-f]{8,32}")

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self._items: dict[str, TaskProgress] = {}
        self._lock = threading.Lock()

    def new(self, progress_id: str) -> TaskProgress:
        if not self.ID.fullmatch(progress_id):
            raise UploadError(
                f"progress_id {progress_id!r} must be 8-32 lowercase hex digits",
                422,
                "bad_progress_id",
            )
        with self._lock:
            record = self._items[progress_id] = TaskProgress()
            while len(self._items) > self.keep:
                self._items.pop(next(iter(self._items)))
        return record

    def get(self, progress_id: str) -> TaskProgress | None:
        with self._lock:
            return self._items.get(progress_id)


class ProgressPool:
    """An environment pool that reports each tool call and its result to a TaskProgress."""

    def __init__(self, pool: EnvPoolLike, progress: TaskProgress) -> None:
        self.pool = pool
        self.progress = progress

    def reset(self, episode_id: str, task: Task, case: int) -> Future[Observation]:
        return self.pool.reset(episode_id, task, case)

    def step(self, episode_id: str, call: ToolCall) -> Future[StepResult]:
        index = self.progress.call(call)
        future = self.pool.step(episode_id, call)

        def done(f: Future[StepResult]) -> None:
            if not f.cancelled() and f.exception() is None:
                self.progress.result(index, f.result())

        future.add_done_callback(done)
        return future

    def finish(self, episode_id: str, **kwargs: str | None) -> Future[EpisodeResult]:
        return self.pool.finish(episode_id, **kwargs)


def gym_pool_factory(workers: int) -> PoolFactory:
    """Pools of the spreadsheet gym, one per task, with the request's tool preset."""

    def factory(preset: str) -> AbstractContextManager[Any]:
        from spreadrl.env.factory import make_env_pool

        return make_env_pool(preset, workers=workers)

    return factory

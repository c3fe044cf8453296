"""Spreadsheet-RL's released parquet rows -> tasks, the workbooks read from its task folders.

A row is verl's RL record (``verl/verl/utils/dataset/rl_dataset.py`` reads
it): ``data_source``, ``agent_name``, ``prompt`` (the chat the agent loop
renders with the tool schemas: a list of ``{role, content}`` messages),
``ability``, ``reward_model`` (``ground_truth``: the task folder) and
``extra_info``. The row holds no workbook and no answer position: those come
from the task folder (``instruction.json``, ``output.xlsx``, ``target.xlsx``),
read through :class:`~spreadrl.data.importers.rl_release.TaskFolders`.

The prompt is kept verbatim in ``metadata["prompt"]`` (the rollout's
``rollout.prompt_source=task`` sends it as the episode's opening messages);
the rest of the row is kept beside it, so nothing of the release is lost.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spreadrl.data.importers.common import check_task_id, is_xlsx_bytes, write_task, writer
from spreadrl.data.importers.rl_record import task_fields
from spreadrl.data.importers.rl_release import (
    ANSWER_WORKBOOK,
    INSTRUCTION,
    START_WORKBOOK,
    TaskFolders,
    ground_truth_path,
    task_id_for,
)
from spreadrl.data.jsontypes import JSONValue
from spreadrl.data.task import Task
from spreadrl.errors import MissingDependencyError, TaskFormatError

COLUMNS = ("data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info")
_REQUIRED = ("prompt", "reward_model")


def _plain(value: object) -> JSONValue:
    """A JSON-ready copy (arrow may hand back numpy scalars or tuples)."""
    return json.loads(json.dumps(value, default=str))


def check_prompt(value: object, where: str) -> list[dict[str, Any]]:
    """The row's chat as a list of ``{role, content, ...}`` messages, verbatim.

    Keys arrow filled with None (a struct column's union of fields) are dropped;
    everything else is kept as released.
    """
    if not isinstance(value, list | tuple) or not value:
        raise TaskFormatError(
            f"{where}: prompt is {type(value).__name__}, expected a non-empty list of "
            "{role, content} messages (verl's chat format)"
        )
    messages = []
    for n, message in enumerate(value):
        if not isinstance(message, dict):
            raise TaskFormatError(f"{where}: prompt message {n} is not a {{role, content}} object")
        kept = {k: v for k, v in message.items() if v is not None}
        if not isinstance(kept.get("role"), str) or not isinstance(kept.get("content"), str):
            raise TaskFormatError(
                f"{where}: prompt message {n} needs a string role and content, "
                f"got keys {sorted(kept)}"
            )
        messages.append(_plain(kept))
    return messages


def _read_instruction(folders: TaskFolders, folder: str, task_id: str) -> dict[str, Any]:
    raw = folders.read(folder, INSTRUCTION, task_id)
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFormatError(
            f"task {task_id!r}: unreadable {folder}/{INSTRUCTION} ({exc})"
        ) from exc
    if not isinstance(record, dict):
        raise TaskFormatError(f"task {task_id!r}: {folder}/{INSTRUCTION} is not a JSON object")
    return record


def read_task_folder(
    folders: TaskFolders, folder: str, task_id: str
) -> tuple[dict[str, Any], bytes, bytes]:
    """(instruction.json, start workbook, answer workbook) of one task folder, checked."""
    record = _read_instruction(folders, folder, task_id)
    books = []
    for name in (START_WORKBOOK, ANSWER_WORKBOOK):
        data = folders.read(folder, name, task_id)
        if not is_xlsx_bytes(data, f"task {task_id!r}: {folder}/{name}"):
            raise TaskFormatError(
                f"task {task_id!r}: {folder}/{name} is not a readable .xlsx workbook"
            )
        books.append(data)
    return record, books[0], books[1]


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a core dependency
        raise MissingDependencyError(
            "reading parquet needs `datasets` (pip install datasets)"
        ) from exc
    quiet = datasets.is_progress_bar_enabled()
    if quiet:
        datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="spreadrl-parquet-") as cache:
            try:
                table = datasets.load_dataset(
                    "parquet", data_files=[str(path)], split="train", cache_dir=cache
                )
            except Exception as exc:  # arrow/datasets raise many types for a bad file
                raise TaskFormatError(f"{path}: unreadable parquet file ({exc})") from exc
            names = list(table.column_names)
            missing = [c for c in _REQUIRED if c not in names]
            if missing:
                raise TaskFormatError(
                    f"{path}: not a Spreadsheet-RL release file: no {', '.join(missing)} "
                    f"column (expected {', '.join(COLUMNS)}; found {', '.join(names)})"
                )
            yield from enumerate(table)
    finally:
        if quiet:
            datasets.enable_progress_bars()


def _row_builder(
    path: Path,
    index: int,
    row: dict[str, Any],
    folders: TaskFolders,
    split: str | None,
    parser: str | None,
) -> tuple[str, Callable[[Path], Task]]:
    where = f"{path} row {index}"
    reward_model = row.get("reward_model")
    ground_truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    try:
        folder = ground_truth_path(ground_truth, where)
        label = task_id_for(folder)
    except TaskFormatError:
        folder, label = None, f"{split or path.stem}-row{index:05d}"

    def build(staging: Path) -> Task:
        checked = ground_truth_path(ground_truth, where) if folder is None else folder
        task_id = check_task_id(label, where)
        prompt = check_prompt(row.get("prompt"), where)
        record, start, answer = read_task_folder(folders, checked, task_id)
        metadata: dict[str, Any] = {
            "split": split,
            "parser": parser,
            "parquet_file": path.name,
            "row": index,
            "ground_truth": checked,
            "start_workbook": START_WORKBOOK,
            "prompt": prompt,
        }
        for key in ("data_source", "agent_name", "ability", "extra_info"):
            if row.get(key) is not None:
                metadata[key] = _plain(row[key])
        fields = task_fields(record, task_id, f"{checked}/{INSTRUCTION}", metadata=metadata)
        return write_task(staging, task_id, [(writer(start), writer(answer))], **fields)

    return label, build


def parquet_items(
    path: Path, folders: TaskFolders, *, split: str | None, parser: str | None
) -> Iterator[tuple[str, Callable[[Path], Task]]]:
    """(task id, build) pairs for every row of one released parquet file, read lazily."""
    for index, row in _rows(path):
        yield _row_builder(path, index, row, folders, split, parser)

"""Spreadsheet-RL's parquet splits, read with ``datasets`` from local files.

Our notes do not document the column names, so the columns are detected: the
instruction and answer_position by name (top level, or one level down inside a
struct column such as verl's ``extra_info``), the workbooks as bytes columns
whose names say input (``input``, ``init``, ``original``, ``*_xlsx``) or answer
(``target``, ``answer``, ``golden``); ``output`` (the working copy) is never
taken. When the workbook columns cannot be identified the error lists every
column found, with its type.

A file's split is its name without the Hub's shard suffix
(``train-00000-of-00001.parquet`` -> ``train``), or its folder's name when the
file name is a bare number (``train/0000.parquet``).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spreadrl.data.importers.common import check_task_id, write_task, writer
from spreadrl.data.importers.rl_record import task_fields
from spreadrl.data.task import Task
from spreadrl.errors import MissingDependencyError, SpreadrlError, TaskFormatError

_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
INPUT_WORDS = ("input", "init", "original", "source")
ANSWER_WORDS = ("target", "answer", "golden", "gold", "expected")
ID_KEYS = ("id", "task_id", "uid")


def split_of(path: Path) -> str:
    stem = _SHARD.sub("", path.stem)
    return path.parent.name if stem.isdigit() else stem


def _select_files(files: list[Path], src: Path, split: str | None) -> tuple[list[Path], str]:
    by_split: dict[str, list[Path]] = {}
    for path in files:
        by_split.setdefault(split_of(path), []).append(path)
    if split is None:
        if len(by_split) > 1:
            raise SpreadrlError(
                f"{src}: holds the parquet splits {', '.join(sorted(by_split))}; "
                "choose one with --split"
            )
        return files, next(iter(by_split))
    if split not in by_split:
        raise SpreadrlError(
            f"{src}: no parquet split {split!r} (splits found: {', '.join(sorted(by_split))})"
        )
    return by_split[split], split


def _workbook_bytes(value: Any) -> bytes | None:
    return bytes(value) if isinstance(value, bytes | bytearray) else None


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """Top-level columns plus the fields of struct columns as ``column.field``."""
    flat = dict(row)
    for name, value in row.items():
        if isinstance(value, dict):
            for key, inner in value.items():
                flat[f"{name}.{key}"] = inner
    return flat


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


def _find_column(names: list[str], words: tuple[str, ...]) -> str | None:
    for word in words:
        for name in names:
            leaf = _leaf(name)
            if "output" not in leaf and word in leaf:
                return name
    return None


def _value(flat: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The first non-empty field named ``key`` at the top level or inside a struct."""
    for key in keys:
        for name, value in flat.items():
            if _leaf(name) == key and value not in (None, ""):
                return value
    return None


def _by_leaf(flat: dict[str, Any]) -> dict[str, Any]:
    """Fields by their own name; a top-level column wins over a struct field of that name."""
    record: dict[str, Any] = {}
    for name in sorted(flat, key=lambda n: n.count(".")):
        value = flat[name]
        if value not in (None, "") and _leaf(name) not in record:
            record[_leaf(name)] = value
    return record


def _feature_kinds(features: Any, prefix: str = "") -> dict[str, str]:
    """``column`` (or ``column.field`` inside a struct) -> its arrow dtype."""
    kinds: dict[str, str] = {}
    for name, feature in dict(features).items():
        if isinstance(feature, dict):
            kinds.update(_feature_kinds(feature, f"{prefix}{name}."))
        else:
            kinds[f"{prefix}{name}"] = str(getattr(feature, "dtype", type(feature).__name__))
    return kinds


def workbook_columns(kinds: dict[str, str], where: str) -> tuple[str, str]:
    """(input column, answer column) among the bytes columns, or an error listing all columns."""
    binary = [name for name, kind in kinds.items() if kind in ("binary", "large_binary")]
    source, answer = _find_column(binary, INPUT_WORDS), _find_column(binary, ANSWER_WORDS)
    if source is None or answer is None or source == answer:
        found = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        raise TaskFormatError(
            f"{where}: cannot identify the workbook columns (need bytes columns named like "
            f"input/input_xlsx and target/answer_xlsx); columns found: {found}"
        )
    return source, answer


def _rows(files: list[Path]) -> Iterator[tuple[Path, int, dict[str, Any], Any]]:
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
        for path in files:
            with tempfile.TemporaryDirectory(prefix="spreadrl-parquet-") as cache:
                try:
                    table = datasets.load_dataset(
                        "parquet", data_files=[str(path)], split="train", cache_dir=cache
                    )
                except Exception as exc:  # arrow/datasets raise many types for a bad file
                    raise TaskFormatError(f"{path}: unreadable parquet file ({exc})") from exc
                for index, row in enumerate(table):
                    yield path, index, row, table.features
    finally:
        if quiet:
            datasets.enable_progress_bars()


def _row_builder(
    path: Path, index: int, flat: dict[str, Any], columns: tuple[str, str], task_id: str, split: str
) -> Callable[[Path], Task]:
    def build(staging: Path) -> Task:
        where = f"{path} row {index}"
        checked_id = check_task_id(task_id, where)
        books = []
        for column in columns:
            data = _workbook_bytes(flat.get(column))
            if not data:
                raise TaskFormatError(f"{where}: task {checked_id!r} has no workbook in {column!r}")
            if not data.startswith(b"PK"):
                raise TaskFormatError(
                    f"{where}: task {checked_id!r}: column {column!r} does not hold an .xlsx workbook"
                )
            books.append(data)
        metadata = {"split": split, "parquet_file": path.name, "row": index}
        fields = task_fields(_by_leaf(flat), checked_id, where, metadata=metadata)
        return write_task(staging, checked_id, [(writer(books[0]), writer(books[1]))], **fields)

    return build


def parquet_items(
    files: list[Path], src: Path, split: str | None
) -> Iterator[tuple[str, Callable[[Path], Task]]]:
    """(task id, build) pairs for every row of the chosen split, read lazily file by file."""
    chosen, split_name = _select_files(files, src, split)
    columns: dict[Path, tuple[str, str]] = {}
    for path, index, row, features in _rows(chosen):
        flat = flatten(row)
        if path not in columns:
            columns[path] = workbook_columns(_feature_kinds(features), str(path))
        task_id = _value(flat, ID_KEYS)
        label = str(task_id) if task_id not in (None, "") else f"{split_name}-{index:05d}"
        yield label, _row_builder(path, index, flat, columns[path], label, split_name)

"""Import a local copy of Spreadsheet-RL: its task folders or its parquet splits.

Folder layout: one folder per task with ``instruction.json`` ({instruction,
answer_position}, sometimes id / instruction_type), ``input.xlsx`` (the
original), ``output.xlsx`` (the agent's working copy: ignored) and
``target.xlsx`` (the answer). Folders may sit under split folders
(``train/``, ``test/``...): ``split`` picks one.

Parquet layout: split files (train, test, test_verified, test_2, test_domain)
whose rows embed the workbooks as bytes; see
:mod:`spreadrl.data.importers.rl_parquet`.

Spreadsheet-RL has no instruction_type: it is inferred from the
answer_position (:func:`infer_instruction_type`) and
``metadata["instruction_type_source"]`` says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spreadrl.data.importers.common import (
    ImportReport,
    check_paths,
    check_task_id,
    check_xlsx,
    copier,
    run_import,
    write_task,
)
from spreadrl.data.importers.rl_record import SOURCE, task_fields
from spreadrl.data.task import Task
from spreadrl.errors import SpreadrlError, TaskFormatError

INPUT_NAMES = ("input.xlsx", "init.xlsx")
ANSWER_NAMES = ("target.xlsx", "answer.xlsx", "golden.xlsx")


def _read_instruction(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFormatError(f"{path}: unreadable instruction.json ({exc})") from exc
    if not isinstance(record, dict):
        raise TaskFormatError(f"{path}: expected a JSON object")
    return record


def _label(folder: Path) -> str:
    """The task id: instruction.json's id when readable, else the folder name."""
    try:
        record = _read_instruction(folder / "instruction.json")
    except TaskFormatError:
        return folder.name
    return str(record.get("id") or folder.name)


def _pick(folder: Path, names: tuple[str, ...], task_id: str, what: str) -> Path:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise TaskFormatError(
        f"task {task_id!r}: no {what} workbook in {folder} (expected {' or '.join(names)})"
    )


def _folder_builder(folder: Path, base: Path, split: str | None):
    def build(staging: Path) -> Task:
        info = folder / "instruction.json"
        record = _read_instruction(info)
        task_id = check_task_id(record.get("id") or folder.name, str(info))
        source = _pick(folder, INPUT_NAMES, task_id, "input")
        answer = _pick(folder, ANSWER_NAMES, task_id, "target")
        check_xlsx(source, task_id)
        check_xlsx(answer, task_id)
        relative = folder.relative_to(base).as_posix()
        metadata: dict[str, Any] = {"original_folder": relative}
        parts = folder.relative_to(base).parts
        if split or len(parts) > 1:
            metadata["split"] = split or parts[0]
        fields = task_fields(record, task_id, str(info), metadata=metadata)
        return write_task(staging, task_id, [(copier(source), copier(answer))], **fields)

    return build


def _parquet_files(src: Path) -> list[Path]:
    if src.is_file():
        return [src] if src.suffix == ".parquet" else []
    return sorted(src.rglob("*.parquet"))


def import_spreadsheet_rl(
    src: Path,
    out: Path,
    *,
    split: str | None = None,
    skip_bad: bool = False,
    overwrite: bool = False,
) -> ImportReport:
    """Convert a local Spreadsheet-RL copy (task folders or parquet splits) into the native layout.

    ``src`` is a folder of task folders, a folder of split folders (pick one
    with ``split``), a folder of parquet files, or one parquet file. Parquet
    sets holding several splits need ``split``.
    """
    src, out = Path(src), Path(out)
    check_paths(src, out, overwrite=overwrite)
    report = ImportReport(source=SOURCE, src=src, out=out)
    parquet = _parquet_files(src)
    if parquet:
        from spreadrl.data.importers.rl_parquet import parquet_items

        return run_import(report, parquet_items(parquet, src, split), skip_bad=skip_bad)
    base = src
    if split:
        if not (src / split).is_dir():
            have = sorted(p.name for p in src.iterdir() if p.is_dir()) if src.is_dir() else []
            raise SpreadrlError(
                f"{src}: no split folder {split!r} (folders here: {', '.join(have) or 'none'})"
            )
        base = src / split
    folders = sorted(p.parent for p in base.rglob("instruction.json"))
    if not folders:
        raise TaskFormatError(
            f"{src}: neither task folders (with instruction.json, input.xlsx, target.xlsx) "
            "nor parquet files found"
        )
    items = [(_label(folder), _folder_builder(folder, base, split)) for folder in folders]
    return run_import(report, items, skip_bad=skip_bad)

"""One Spreadsheet-RL task record (instruction.json or a parquet row) as Task fields.

Shared by the folder importer (:mod:`spreadrl.data.importers.spreadsheet_rl`)
and the parquet reader (:mod:`spreadrl.data.importers.rl_parquet`), which the
folder importer calls: kept apart so neither imports the other back.
"""

from __future__ import annotations

from typing import Any

from spreadrl.data.importers.common import (
    check_answer_position,
    infer_instruction_type,
    normalize_instruction_type,
)
from spreadrl.errors import TaskFormatError

SOURCE = "spreadsheet-rl"
INSTRUCTION_KEYS = ("instruction", "question", "query")


def first_key(record: dict[str, Any], keys: tuple[str, ...]) -> object:
    for key in keys:
        if record.get(key) not in (None, ""):
            return record[key]
    return None


def task_fields(
    record: dict[str, Any], task_id: str, where: str, *, metadata: dict[str, Any]
) -> dict[str, Any]:
    """Task fields from one Spreadsheet-RL record (instruction.json or a parquet row)."""
    instruction = first_key(record, INSTRUCTION_KEYS)
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError(
            f"{where}: task {task_id!r} has no instruction (looked for {', '.join(INSTRUCTION_KEYS)})"
        )
    answer_position = check_answer_position(record.get("answer_position"), task_id, where)
    if record.get("instruction_type"):
        instruction_type = normalize_instruction_type(record["instruction_type"], task_id, where)
        type_source = "given"
    else:
        instruction_type, type_source = infer_instruction_type(answer_position), "inferred"
    return {
        "instruction": instruction,
        "instruction_type": instruction_type,
        "answer_position": answer_position,
        "source": SOURCE,
        "metadata": {**metadata, "instruction_type_source": type_source},
    }

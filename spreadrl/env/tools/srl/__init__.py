"""The ``spreadsheet-rl`` tool preset: Spreadsheet-RL's tool contracts as a view of the gym's tools.

Spreadsheet-RL-4B was trained on the twelve tools of its repository's
``configs/tool/spreadsheet_tools.yaml``: the same names as this gym's, other
arguments (an optional ``path`` and ``sheet_name``, ``data``, ``start_cell`` /
``end_row`` / ``end_col`` / ``formula_template``, row lists like
``['3', '7:9']``) and compact JSON replies capped at 4,096 characters (10,240
for ``inspect_range``). This package is that view and nothing more: each tool
checks its upstream-shaped arguments, calls the behaviour the gym's own tools
use (:func:`~spreadrl.env.tools.edit.write_values`,
:func:`~spreadrl.env.tools.edit.fill_cells`,
:func:`~spreadrl.env.tools.structure.change_sheets`,
:func:`~spreadrl.env.refshift.delete_and_shift`,
:func:`~spreadrl.env.tools.compute.run_code`, ...) and answers in upstream's
shape.

Laid out as the gym's own tools are: :mod:`.specs` (the schemas, as data; their
facts equal upstream's yaml, ``tests/env/test_tools_srl.py``, the descriptions
are this project's words), :mod:`.arguments` (the models built from them),
:mod:`.replies` (JSON answers and error codes), :mod:`.address` (the workbook
path, sheets and ranges), and the adapters by concern: :mod:`.read`,
:mod:`.edit`, :mod:`.structure`, :mod:`.compute`. :mod:`.descriptions` takes
upstream's own wording from a copy of its yaml that a user holds.
"""

from __future__ import annotations

from collections.abc import Callable

from spreadrl.env.tools.base import Tool, ToolContext
from spreadrl.env.tools.srl import compute, edit, read, structure
from spreadrl.env.tools.srl.address import check_path
from spreadrl.env.tools.srl.arguments import SrlArgs, args_model
from spreadrl.env.tools.srl.descriptions import with_upstream_descriptions
from spreadrl.env.tools.srl.replies import (
    INSPECT_RESPONSE_CHARS,
    MAX_RESPONSE_CHARS,
    WORKBOOK,
    reply_error,
)
from spreadrl.env.tools.srl.specs import PARALLEL_SAFE, SCHEMAS

Adapter = Callable[[ToolContext, SrlArgs], str]

RUN: dict[str, Adapter] = {
    "inspect_range": read.inspect_range,
    "list_sheets": read.list_sheets,
    "manage_sheet": structure.manage_sheet,
    "find_cells": read.find_cells,
    "write_range": edit.write_range,
    "format_range": edit.format_range,
    "fill_formula": edit.fill_formula,
    "clear_range": edit.clear_range,
    "delete_rows": structure.delete_rows,
    "delete_columns": structure.delete_columns,
    "recalculate_and_read": compute.recalculate_and_read,
    "code_interpreter": compute.code_interpreter,
}


def _with_path(name: str, run: Adapter) -> Adapter:
    def call(ctx: ToolContext, args: SrlArgs) -> str:
        if hasattr(args, "path"):
            check_path(ctx, args.path)
        return run(ctx, args)

    call.__name__ = name
    return call


def tools() -> list[Tool]:
    """The preset's tools: upstream's schemas over the gym's behaviour, errors as JSON."""
    return [
        Tool(
            name,
            schema["function"]["description"],
            args_model(name),
            _with_path(name, RUN[name]),
            parallel_safe=name in PARALLEL_SAFE,
            fixed_schema=schema,
            on_error=None if name == "code_interpreter" else reply_error,
        )
        for name, schema in SCHEMAS.items()
    ]


__all__ = [
    "INSPECT_RESPONSE_CHARS",
    "MAX_RESPONSE_CHARS",
    "RUN",
    "SCHEMAS",
    "WORKBOOK",
    "tools",
    "with_upstream_descriptions",
]

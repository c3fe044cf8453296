"""The ``spreadsheet-rl`` tool preset: Spreadsheet-RL's tool contracts as a view of the gym's tools.

Spreadsheet-RL-4B was trained on the twelve tools of its repository's
``configs/tool/spreadsheet_tools.yaml``: the same names as this gym's, other
arguments (an optional ``path`` and ``sheet_name``, ``data``, ``start_cell`` /
``end_row`` / ``end_col`` / ``formula_template``, row lists like
``['3', '7:9']``) and compact JSON replies capped at 4,096 characters (10,240
for ``inspect_range``). This package is that view and nothing more: each tool
checks its upstream-shaped arguments, calls the behaviour the gym's own tools
use (:func:`~spreadrl.env.spreadsheet.tools.edit.write_values`,
:func:`~spreadrl.env.spreadsheet.tools.edit.fill_cells`,
:func:`~spreadrl.env.spreadsheet.tools.structure.change_sheets`,
:func:`~spreadrl.env.spreadsheet.refshift.delete_and_shift`,
:func:`~spreadrl.env.spreadsheet.tools.compute.run_code`, ...) and answers in upstream's
shape.

Laid out as the gym's own tools are: :mod:`.specs` (the schemas, as data; their
facts equal upstream's yaml, ``tests/env/spreadsheet/test_tools_srl.py``, the descriptions
are this project's words), :mod:`.arguments` (the models built from them),
:mod:`.replies` (JSON answers and error codes), :mod:`.address` (the workbook
path, sheets and ranges), and the adapters by concern: :mod:`.read`,
:mod:`.edit`, :mod:`.structure`, :mod:`.compute`. :mod:`.descriptions` takes
upstream's own wording from a copy of its yaml that a user holds.

:func:`tools_2606` is the ``spreadsheet-rl-2606`` preset: upstream's June 2026
scaffold over the same adapters, plus :mod:`.copy` (copy_range), sheet names
resolved as that scaffold resolves them (:mod:`.sheets`), a fill_formula that
normalizes and checks its template first (:mod:`.formulas`), and a find_cells
that says which sheets it searched. docs/tools.md lists what differs from
upstream.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from spreadrl.env.spreadsheet.tools.base import Tool, ToolContext
from spreadrl.env.spreadsheet.tools.srl import compute, copy, edit, read, structure
from spreadrl.env.spreadsheet.tools.srl.address import check_path
from spreadrl.env.spreadsheet.tools.srl.arguments import SrlArgs, args_model
from spreadrl.env.spreadsheet.tools.srl.descriptions import with_upstream_descriptions
from spreadrl.env.spreadsheet.tools.srl.formulas import check_syntax, normalized
from spreadrl.env.spreadsheet.tools.srl.replies import (
    INSPECT_RESPONSE_CHARS,
    MAX_RESPONSE_CHARS,
    WORKBOOK,
    reply_error,
)
from spreadrl.env.spreadsheet.tools.srl.sheets import resolved
from spreadrl.env.spreadsheet.tools.srl.specs import COPY_RANGE_SCHEMA, PARALLEL_SAFE, SCHEMAS

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


# ---- the June 2026 scaffold ------------------------------------------------------------------
def _fill_checked(ctx: ToolContext, args: SrlArgs) -> str:
    """fill_formula, its template normalized and its syntax checked first."""
    template = args.formula_template
    if isinstance(template, str) and template.strip():
        template = normalized(template)
        check_syntax(template)
        args = args.model_copy(update={"formula_template": template})
    return edit.fill_formula(ctx, args)


def _find_naming_sheets(ctx: ToolContext, args: SrlArgs) -> str:
    """find_cells, saying which sheets it searched (``sheet_scope``, ``searched_sheets``)."""
    reply = read.find_cells(ctx, args)
    payload = json.loads(reply)
    if "matches_csv" not in payload:  # cut to its minimum: keep it as it is
        return reply
    if args.range and "!" in args.range:
        searched = [ctx.book.parse_range(args.range).sheet]
    elif args.sheet_name:
        searched = [ctx.book.sheet_name(args.sheet_name)]
    else:
        searched = list(ctx.book.wb.sheetnames)
    scope = "all" if not args.sheet_name and not (args.range and "!" in args.range) else searched[0]
    extra = {"sheet_scope": scope, "searched_sheets": searched}
    wider = json.dumps({**payload, **extra}, ensure_ascii=False, separators=(",", ":"))
    return wider if len(wider) <= MAX_RESPONSE_CHARS else reply


RUN_2606: dict[str, Adapter] = {
    **RUN,
    "find_cells": _find_naming_sheets,
    "fill_formula": _fill_checked,
    "copy_range": copy.copy_range,
}


def _resolving(name: str, run: Adapter) -> Adapter:
    def call(ctx: ToolContext, args: SrlArgs) -> str:
        return run(ctx, resolved(ctx, name, args))

    call.__name__ = name
    return call


def schemas_2606() -> dict[str, dict[str, object]]:
    """The 2606 preset's schemas: the twelve above, with copy_range after write_range."""
    out: dict[str, dict[str, object]] = {}
    for name, schema in SCHEMAS.items():
        out[name] = schema
        if name == "write_range":
            out["copy_range"] = COPY_RANGE_SCHEMA
    return out


def tools_2606() -> list[Tool]:
    """The ``spreadsheet-rl-2606`` preset: upstream's June 2026 scaffold over the gym's behaviour."""
    return [
        Tool(
            name,
            schema["function"]["description"],
            args_model(name, schema),
            _with_path(name, _resolving(name, RUN_2606[name])),
            parallel_safe=name in PARALLEL_SAFE,
            fixed_schema=schema,
            on_error=None if name == "code_interpreter" else reply_error,
        )
        for name, schema in schemas_2606().items()
    ]


__all__ = [
    "INSPECT_RESPONSE_CHARS",
    "MAX_RESPONSE_CHARS",
    "RUN",
    "SCHEMAS",
    "WORKBOOK",
    "tools",
    "tools_2606",
    "with_upstream_descriptions",
]

"""The Spreadsheet Gym's tools as data: one :class:`Tool` per tool, schema generated from it.

Each tool is a name, a description, a pydantic model of its arguments and a
function ``run(ctx, args) -> str``. The JSON schema the model sees (Hermes /
OpenAI function format) is generated from the same pydantic model the call is
validated with, so what is advertised and what is accepted cannot drift apart.
The argument names follow docs/tools.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spreadrl.env.spreadsheet.tools import compute, copy, edit, read, srl, structure
from spreadrl.env.spreadsheet.tools.base import (
    Tool,
    ToolArguments,
    ToolContext,
    describe_validation_error,
    signature,
)
from spreadrl.env.spreadsheet.workbook import ToolError
from spreadrl.errors import SpreadrlError


def _registry() -> dict[str, Tool]:
    ordered = [*read.TOOLS, *structure.TOOLS, *edit.TOOLS, *copy.TOOLS, *compute.TOOLS]
    order = [
        "inspect_range",
        "list_sheets",
        "manage_sheet",
        "find_cells",
        "write_range",
        "format_range",
        "fill_formula",
        "clear_range",
        "delete_rows",
        "delete_columns",
        "recalculate_and_read",
        "code_interpreter",
        "copy_range",
    ]
    by_name = {t.name: t for t in ordered}
    return {name: by_name[name] for name in order}


TOOLS: dict[str, Tool] = _registry()
# Spreadsheet-RL's contracts over the same behaviour (spreadrl/env/spreadsheet/tools/srl/): the same
# names, so presets, never mixed with spreadrl's tools in one list
SRL_TOOLS: dict[str, Tool] = {t.name: t for t in srl.tools()}
SRL_PRESET = "spreadsheet-rl"  # the released checkpoint's twelve tools
SRL_2606_TOOLS: dict[str, Tool] = {t.name: t for t in srl.tools_2606()}
SRL_2606_PRESET = "spreadsheet-rl-2606"  # upstream's June 2026 scaffold, with copy_range
WHOLE_SETS: dict[str, dict[str, Tool]] = {SRL_PRESET: SRL_TOOLS, SRL_2606_PRESET: SRL_2606_TOOLS}
PRESETS: dict[str, tuple[str, ...]] = {
    "minimal": ("recalculate_and_read", "code_interpreter"),
    # the set the demo and recipes were calibrated with; copy_range is asked for by name
    "full": tuple(name for name in TOOLS if name != "copy_range"),
    SRL_PRESET: tuple(SRL_TOOLS),
    SRL_2606_PRESET: tuple(SRL_2606_TOOLS),
}


def resolve_tools(spec: str | Sequence[str]) -> list[Tool]:
    """Tools named by a preset, a comma-separated string, or a list of names/presets.

    Raises SpreadrlError listing the valid names when one is unknown.
    """
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    for preset, tools in WHOLE_SETS.items():
        if preset in names:
            if any(n and n != preset for n in names):
                raise SpreadrlError(
                    f"env tools: the {preset} preset is a whole tool set (its tools share "
                    "names with spreadrl's); use it alone"
                )
            return list(tools.values())
    chosen: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            continue
        expanded = PRESETS.get(name, (name,))
        for tool in expanded:
            if tool not in TOOLS:
                valid = ", ".join([*PRESETS, *TOOLS])
                raise SpreadrlError(f"unknown tool or preset {tool!r} in env tools; valid: {valid}")
            if tool not in chosen:
                chosen.append(tool)
    if not chosen:
        raise SpreadrlError(f"env tools is empty; use a preset ({', '.join(PRESETS)}) or names")
    return [TOOLS[name] for name in chosen]


def tool_schemas(spec: str | Sequence[str] = "full") -> list[dict[str, Any]]:
    """The JSON schemas of the tools ``spec`` names, in registry order of the spec."""
    return [tool.schema() for tool in resolve_tools(spec)]


__all__ = [
    "PRESETS",
    "SRL_2606_PRESET",
    "SRL_2606_TOOLS",
    "SRL_PRESET",
    "SRL_TOOLS",
    "TOOLS",
    "Tool",
    "ToolArguments",
    "ToolContext",
    "ToolError",
    "describe_validation_error",
    "resolve_tools",
    "signature",
    "tool_schemas",
]

"""What every tool is made of: :class:`ToolContext` (what a tool may touch) and :class:`Tool`.

Kept apart from the registry in ``spreadrl.env.spreadsheet.tools`` so the tool modules
(read, edit, structure, compute, srl) import these at module level and the
registry imports the tool modules, with no cycle between them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from pydantic import BaseModel, ValidationError

from spreadrl.data.jsontypes import JSONValue
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.workbook import ToolError, WorkingCopy

ToolArguments: TypeAlias = JSONValue
"""A tool call's arguments as the model sent them: a JSON object, or that object as
JSON text (some models do); anything else is refused with a readable error."""


@dataclass
class ToolContext:
    """What a tool may touch: the episode's working copy, its folder and the config."""

    book: WorkingCopy
    config: EnvConfig
    folder: Path
    # per-episode memo of the tools (recalculated values, the engine, timings)
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    """One tool: its schema and its implementation come from the same definition."""

    name: str
    description: str
    args: type[BaseModel]
    run: Callable[[ToolContext, Any], str]
    # only reads the workbook: the loop may run several in one turn without the serial cap
    parallel_safe: bool = False
    # a schema written out (the spreadsheet-rl preset: upstream's facts) instead of generated;
    # the args model is built from it, so the two still cannot drift
    fixed_schema: dict[str, Any] | None = None
    # turns a refused call into the preset's own error reply (spreadsheet-rl: JSON)
    on_error: Callable[[ToolError], ToolError] | None = None

    def schema(self) -> dict[str, Any]:
        """The tool in Hermes/OpenAI function format."""
        if self.fixed_schema is not None:
            return copy.deepcopy(self.fixed_schema)
        params = _clean(self.args.model_json_schema())
        params.setdefault("properties", {})
        params.setdefault("required", [])
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def call(self, ctx: ToolContext, arguments: ToolArguments) -> str:
        """Validate ``arguments`` and run; bad arguments raise ToolError with a readable message."""
        try:
            return self._call(ctx, arguments)
        except ToolError as exc:
            if self.on_error is None or getattr(exc, "observation", None) is not None:
                raise
            raise self.on_error(exc) from None

    def _call(self, ctx: ToolContext, arguments: ToolArguments) -> str:
        if isinstance(arguments, str):  # some models send the arguments object as JSON text
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError:
                raise ToolError(
                    f"arguments of {self.name} are not valid JSON; send an object like "
                    '{"range": "A1", "values": 1}'
                ) from None
        if not isinstance(arguments, dict):
            raise ToolError(
                f"arguments of {self.name} must be a JSON object, got {type(arguments).__name__}"
            )
        try:
            args = self.args.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(describe_validation_error(self, exc)) from None
        return self.run(ctx, args)


def _clean(schema: JSONValue) -> JSONValue:
    """Drop pydantic's titles and fold ``anyOf [T, null]`` into ``type: [T, "null"]``."""
    if isinstance(schema, list):
        return [_clean(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        out[key] = value if key == "default" else _clean(value)
    options = out.get("anyOf")
    if options and all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
        out.pop("anyOf")
        out["type"] = [o["type"] for o in options]
    if "properties" in out:  # property names are data, not keywords: keep them all
        out["properties"] = {k: _clean(v) for k, v in schema["properties"].items()}
    return out


def describe_validation_error(tool: Tool, exc: ValidationError) -> str:
    """A short message: which argument is wrong, why, and what the tool expects."""
    problems = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "missing":
            problems.append(f"missing required argument '{where}'")
        elif err["type"] == "extra_forbidden":
            problems.append(f"unknown argument '{where}'")
        else:
            got = err.get("input")
            shown = repr(got) if len(repr(got)) <= 40 else repr(got)[:37] + "..."
            problems.append(f"'{where}': {err['msg'].rstrip('.')} (got {shown})")
    return f"bad arguments for {tool.name}: {'; '.join(problems)}. Expected {signature(tool)}"


def signature(tool: Tool) -> str:
    """``write_range(range: string, values)``-style summary of a tool's arguments."""
    params = tool.schema()["function"]["parameters"]
    required = set(params.get("required", []))
    parts = []
    for name, prop in params["properties"].items():
        kind = prop.get("type")
        kind = "|".join(kind) if isinstance(kind, list) else kind
        text = f"{name}: {kind}" if kind else name
        parts.append(text if name in required else text + "?")
    return f"{tool.name}({', '.join(parts)})"

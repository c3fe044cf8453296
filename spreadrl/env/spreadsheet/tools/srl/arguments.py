"""Argument models of the spreadsheet-rl tools, built from their written-out schemas."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, create_model

from spreadrl.env.spreadsheet.tools.srl.specs import SCHEMAS, STRICT

SrlArgs: TypeAlias = BaseModel
"""A call's validated arguments: an instance of the model :func:`args_model` builds from
the tool's upstream schema (one model per tool, made at import); the tools read its
fields (the schema's properties) as attributes."""


def _python_type(prop: dict[str, Any]) -> object:
    """The annotation (a runtime type form) a schema property becomes in the args model."""
    kind = prop.get("type")
    if "enum" in prop:
        return Literal[tuple(prop["enum"])]
    if kind == "array" and prop.get("items", {}).get("type") == "string":
        return list[str]
    if not isinstance(kind, str):  # a type list (write_range's data): checked by the tool
        return Any
    return {"string": str, "integer": int, "boolean": bool, "number": float}.get(kind, Any)


def args_model(name: str, schema: dict[str, Any] | None = None) -> type[BaseModel]:
    """The pydantic model that validates a tool's arguments, built from its schema (one source).

    ``schema`` defaults to the spreadsheet-rl preset's schema of ``name``.
    """
    params = (schema or SCHEMAS[name])["function"]["parameters"]
    fields: dict[str, Any] = {}
    for prop, spec in params["properties"].items():
        kind = _python_type(spec)
        required = prop in params["required"]
        default = Field(... if required else None, alias=prop)
        fields[prop + "_" if prop == "return" else prop] = (
            kind if required else Optional[kind],  # noqa: UP045 (a runtime type, not a hint)
            default,
        )
    extra = "forbid" if name in STRICT else "ignore"
    config = ConfigDict(extra=extra, populate_by_name=True)
    return create_model(f"{name}_srl_args", __config__=config, **fields)

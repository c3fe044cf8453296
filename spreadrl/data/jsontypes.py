"""Type aliases for parsed JSON, shared by data and env (the lowest package both import).

``json.loads`` returns these shapes; a function that reads a dataset record, a
tool call's arguments or a solution file takes a :data:`JSONValue` and checks
what it needs, instead of an untyped ``Any``.
"""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]

__all__ = ["JSONObject", "JSONScalar", "JSONValue"]

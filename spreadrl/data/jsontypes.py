"""Type aliases for parsed JSON, shared by data and env (the lowest package both import),
and the one conversion of an arbitrary value to a JSON scalar.

``json.loads`` returns these shapes; a function that reads a dataset record, a
tool call's arguments or a solution file takes a :data:`JSONValue` and checks
what it needs, instead of an untyped ``Any``.
"""

from __future__ import annotations

from typing import TypeAlias

JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = JSONScalar | list["JSONValue"] | dict[str, "JSONValue"]
JSONObject: TypeAlias = dict[str, JSONValue]

__all__ = ["JSONObject", "JSONScalar", "JSONValue", "scalar_or_str"]


def scalar_or_str(value: object) -> JSONScalar:
    """``value`` as JSON carries it: None, text, numbers and booleans as they are, anything
    else (a date, a workbook's error or formula object) as its ``str``."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)

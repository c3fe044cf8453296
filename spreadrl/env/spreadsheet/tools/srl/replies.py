"""How the spreadsheet-rl tools answer: compact JSON within a character cap, errors with a code."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from spreadrl.data.jsontypes import JSONScalar
from spreadrl.env.spreadsheet.tools.common import ReplyError
from spreadrl.env.spreadsheet.workbook import ToolError

MAX_RESPONSE_CHARS = 4096
INSPECT_RESPONSE_CHARS = 10240
WORKBOOK = "data.xlsx"  # the one workbook of an episode, as upstream names it
_VALUE_CHARS = 200


class SrlError(ToolError):
    """A refused call, with upstream's error code (``invalid_path``, ``sheet_not_found``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def dumps(payload: object) -> str:
    """Compact JSON, as upstream's tools answer (no spaces, non-ASCII kept)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)


def error_reply(code: str, message: str) -> str:
    return dumps({"status": "error", "error": code, "message": message, "truncated": False})


def fit(payload: dict[str, Any], cap: int, lists: tuple[str, ...]) -> str:
    """``payload`` as JSON within ``cap`` characters, cutting the lists named in ``lists``.

    The longest list is cut first (keeping its head), binary-searched to the most
    items that fit, and the payload says so (``truncated``, ``response_truncated``).
    """
    text = dumps(payload)
    if len(text) <= cap:
        return text
    payload["truncated"] = True
    payload["response_truncated"] = True
    holders = _list_holders(payload, lists)
    for holder, key in sorted(holders, key=lambda h: -len(dumps(h[0][h[1]]))):
        items = holder[key]
        lo, hi = 0, len(items)
        while lo < hi:  # the most items that fit
            mid = (lo + hi + 1) // 2
            holder[key] = items[:mid]
            if len(dumps(payload)) <= cap:
                lo = mid
            else:
                hi = mid - 1
        holder[key] = items[:lo]
        if lo < len(items):
            holder.setdefault("omitted", len(items) - lo)
        text = dumps(payload)
        if len(text) <= cap:
            return text
    return dumps({"status": payload.get("status", "success"), "truncated": True})


def _list_holders(payload: object, keys: tuple[str, ...]) -> list[tuple[dict[str, Any], str]]:
    found: list[tuple[dict[str, Any], str]] = []
    if isinstance(payload, dict):
        for key, value in payload.items():
            if key in keys and isinstance(value, list | str):
                found.append((payload, key))
            elif isinstance(value, list | dict):
                found.extend(_list_holders(value, keys))
    elif isinstance(payload, list):
        for item in payload:
            found.extend(_list_holders(item, keys))
    return found


def jsonable(value: object) -> JSONScalar:
    """A cell value as JSON: numbers and booleans as they are, dates ISO, long text cut."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    text = str(getattr(value, "text", value))
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def reply_error(exc: ToolError) -> ReplyError:
    """A refused call as upstream's JSON error (code, message), for the model to read."""
    message = str(exc)
    code = getattr(exc, "code", None)
    if code is None and message.startswith("bad arguments"):
        code = "invalid_arguments"
    elif code is None and message.startswith("sheet ") and "does not exist" in message:
        code = "sheet_not_found"
    return ReplyError(message, error_reply(code or "tool_error", message))

"""Sheet names as the June 2026 scaffold resolves them (``verl/verl/tools/worksheet_resolution.py``).

A name the model writes is matched against the workbook's sheets in three
passes, each only when the one before finds nothing: exactly, ignoring case,
then ignoring case and surrounding spaces. Quotes around a name (``'My
sheet'``) are taken off first. Two sheets matching in the same pass are
refused as ``ambiguous_sheet_name``; no match is ``sheet_not_found``, naming
the first ten sheets. The ``spreadsheet-rl-2606`` preset runs every sheet
argument and every sheet a range names through this before its tool sees
them, so the tools get the workbook's own spelling.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.srl.address import split_ranges
from spreadrl.env.spreadsheet.tools.srl.replies import SrlError
from spreadrl.env.spreadsheet.workbook import quote_sheet, split_reference

SHEET_FIELDS = ("sheet_name", "source_sheet_name", "destination_sheet_name")
RANGE_FIELDS = ("range", "start_cell", "source_range", "destination_range")
LIST_FIELDS = ("rows", "columns", "cell_ranges")
# tools that create the sheet they are given: a new name is theirs to take
_CREATES = frozenset({"write_range", "manage_sheet"})


def unquote(name: str) -> str:
    """``'My sheet'`` -> ``My sheet`` (doubled quotes undone); other names unchanged."""
    text = name.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return name


def resolve_sheet(names: list[str], requested: str) -> str | None:
    """The sheet ``requested`` means among ``names``, None when none matches."""
    wanted = unquote(requested)
    passes = (lambda s: s, str.casefold, lambda s: s.strip().casefold())
    for norm in passes:
        key = norm(wanted)
        found = [n for n in names if norm(n) == key]
        if len(found) > 1:
            shown = ", ".join(repr(n) for n in found[:5])
            raise SrlError(
                "ambiguous_sheet_name", f"ambiguous sheet name: {requested!r} matches {shown}"
            )
        if found:
            return found[0]
    return None


def not_found(names: list[str], requested: str) -> SrlError:
    shown = ", ".join(repr(n) for n in names[:10]) or "(none)"
    more = f" (+{len(names) - 10} more)" if len(names) > 10 else ""
    return SrlError(
        "sheet_not_found", f"sheet not found: {requested!r}; available sheets: {shown}{more}"
    )


def _sheet(names: list[str], requested: str, strict: bool) -> str:
    found = resolve_sheet(names, requested)
    if found is None and strict:
        raise not_found(names, requested)
    return found or requested


def _ref(names: list[str], text: str, strict: bool) -> str:
    named, ref = split_reference(text)
    if named is None:
        return text
    return f"{quote_sheet(_sheet(names, named, strict))}!{ref}"


def resolved(ctx: ToolContext, tool: str, args: BaseModel) -> BaseModel:
    """``args`` with every sheet it names spelled as the workbook spells it."""
    names = list(ctx.book.wb.sheetnames)
    strict = tool not in _CREATES
    if tool == "manage_sheet" and getattr(args, "action", None) == "create":
        return args
    update: dict[str, Any] = {}
    for field in SHEET_FIELDS:
        value = getattr(args, field, None)
        if isinstance(value, str) and value.strip():
            update[field] = _sheet(names, value, strict)
    for field in RANGE_FIELDS:
        value = getattr(args, field, None)
        if isinstance(value, str) and value.strip():
            parts = split_ranges(value) if field == "range" else [value]
            update[field] = ", ".join(_ref(names, p, strict) for p in parts)
    for field in LIST_FIELDS:
        value = getattr(args, field, None)
        if isinstance(value, list):
            update[field] = [_ref(names, v, strict) if isinstance(v, str) and v.strip() else v
                             for v in value]  # fmt: skip
    return args.model_copy(update=update)

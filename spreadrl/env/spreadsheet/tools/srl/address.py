"""The workbook path, sheets and ranges the spreadsheet-rl tools accept, and the values they read."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from spreadrl.env.spreadsheet.tools.base import ToolContext
from spreadrl.env.spreadsheet.tools.compute import evaluated
from spreadrl.env.spreadsheet.tools.srl.replies import WORKBOOK, SrlError
from spreadrl.env.spreadsheet.workbook import ToolError, column_letter, quote_sheet, split_reference


def check_path(ctx: ToolContext, path: object) -> None:
    """Accept ``path`` only when it names the episode's workbook; hostile input is refused.

    Absolute paths, ``..``, NUL bytes and non-.xlsx names are ``invalid_path``;
    a relative name is looked up inside the episode folder only (``data/`` may
    prefix it, as upstream allows), never following links out of it.
    """
    if path is None or (isinstance(path, str) and not path.strip()):
        return
    if not isinstance(path, str) or "\0" in path or "\\" in path:
        raise SrlError("invalid_path", "invalid path.")
    rel = PurePosixPath(path.strip())
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise SrlError("invalid_path", "invalid path.")
    if rel.suffix.lower() != ".xlsx":
        raise SrlError("invalid_path", "only .xlsx workbooks are supported.")
    if rel.parts[0] == "data" and len(rel.parts) > 1:
        rel = PurePosixPath(*rel.parts[1:])
    if str(rel) == WORKBOOK:
        return
    folder = ctx.folder.resolve()
    candidate = ctx.folder / str(rel)
    try:
        inside = candidate.resolve(strict=True).is_relative_to(folder)
    except (OSError, RuntimeError):
        inside = False
    if inside and candidate.is_file() and not candidate.is_symlink():
        raise SrlError(
            "unsupported_path",
            f"{path} is not this episode's workbook; these tools edit data.xlsx only "
            "(code_interpreter can read other files)",
        )
    raise SrlError("file_not_found", f"file not found: {path}")


def qualify(ctx: ToolContext, text: object, sheet_name: str | None, what: str = "range") -> str:
    """``text`` with its sheet: the one it names, else ``sheet_name``, else the first sheet."""
    if not isinstance(text, str) or not text.strip():
        raise SrlError("invalid_range", f"{what} must be an A1 string like B2 or Sheet1!A1:C3")
    text = text.strip()
    named, _ = split_reference(text)
    if named is not None:
        if sheet_name and ctx.book.sheet_name(sheet_name) != ctx.book.sheet_name(named):
            raise SrlError(
                "sheet_mismatch",
                f"sheet_name {sheet_name!r} does not match {what} sheet {named!r}.",
            )
        return text
    sheet = ctx.book.sheet_name(sheet_name) if sheet_name else ctx.book.wb.sheetnames[0]
    return f"{quote_sheet(sheet)}!{text}"


def split_ranges(text: str) -> list[str]:
    """``"A1:B2, 'My, sheet'!C3"`` -> its ranges (commas inside quoted sheet names kept)."""
    parts, current, quoted = [], [], False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    if any(not p for p in parts):
        raise SrlError("invalid_range", "empty range in the comma-separated list")
    return parts


def address(sheet: str, row: int, col: int) -> str:
    return f"{quote_sheet(sheet)}!{column_letter(col)}{row}"


def computed_values(ctx: ToolContext) -> dict[str, dict[tuple[int, int], Any]] | None:
    """Recalculated values of the working copy, None when the engine cannot compute them."""
    try:
        return evaluated(ctx)
    except ToolError:
        return None


def is_formula(value: object) -> bool:
    return isinstance(value, str) and value.startswith("=")

"""Cell addressing and answer positions: the part of the task format both data and env need.

``parse_answer_position`` reads the hand-written, messy ``answer_position``
strings of SpreadsheetBench-style tasks (see reference section 3) into
(sheet, range) pairs; ``range_cells`` walks a range the way SpreadsheetBench
does. A1 letters go through openpyxl's own helpers. This module sits in the
low layer (it imports nothing of spreadrl but errors), so the task format in
:mod:`spreadrl.data` and the checker in :mod:`spreadrl.env.spreadsheet.checker` share it.
"""

from __future__ import annotations

import re

from spreadrl.errors import SpreadrlError

MAX_COLUMN = 16384
MAX_ROW = 1048576


class AnswerPositionError(ValueError, SpreadrlError):
    """An answer_position string names no range we can honestly recover."""


_QUOTES = str.maketrans(
    {c: "'" for c in '\u2018\u2019\u201a\u201b\u2032\u00b4`\u201c\u201d\u201e"'}
)
_FULLWIDTH = str.maketrans({"\uff1a": ":", "\uff01": "!", "\uff0c": ",", "\uff04": "$"})
_RANGE_RE = re.compile(r"^([A-Z]{1,3})?(\d+)?(?::([A-Z]{1,3})?(\d+)?)?$")


# openpyxl (and the numpy it pulls in) is imported on first use: the task format
# imports this module, and every `spreadrl` start, --help included, imports that


def _column_number(name: str) -> int:
    from openpyxl.utils.cell import column_index_from_string

    return column_index_from_string(name)


def column_name(number: int) -> str:
    """1 -> "A", 28 -> "AB"."""
    from openpyxl.utils.cell import get_column_letter

    return get_column_letter(number)


def _normalize_range(text: str, reference: str) -> str | None:
    """Upper-case A1 range without ``$``; None when ``text`` is not a range at all."""
    core = re.sub(r"[\s$']", "", text).upper()
    if core.count(":") > 1:
        raise AnswerPositionError(f"{reference!r}: a range has at most two parts, got {text!r}")
    match = _RANGE_RE.match(core)
    if not core or not match:
        return None
    c1, r1, c2, r2 = match.groups()
    if ":" not in core:
        if not (c1 and r1):
            return None
        if _column_number(c1) > MAX_COLUMN or not 1 <= int(r1) <= MAX_ROW:
            raise AnswerPositionError(f"{reference!r}: cell {text!r} is outside a worksheet")
        return f"{c1}{int(r1)}"
    if c1 and r1 and c2 is None and r2:  # row-only end: BD2:308 -> BD2:BD308
        c2 = c1
    if c1 and not r1 and c2 and not r2:  # column-only: A:G
        lo, hi = sorted((_column_number(c1), _column_number(c2)))
        if hi > MAX_COLUMN:
            raise AnswerPositionError(f"{reference!r}: column beyond XFD")
        return f"{column_name(lo)}:{column_name(hi)}"
    if not (c1 and r1 and c2 and r2):
        raise AnswerPositionError(
            f"{reference!r}: cannot read range {text!r} (expected A1:B5, C3, A:G or BD2:308)"
        )
    (ca, cb), (ra, rb) = (
        sorted((_column_number(c1), _column_number(c2))),
        sorted((int(r1), int(r2))),
    )
    if cb > MAX_COLUMN or rb > MAX_ROW or ra < 1:
        raise AnswerPositionError(f"{reference!r}: range {text!r} is outside a worksheet")
    return f"{column_name(ca)}{ra}:{column_name(cb)}{rb}"


def _parse_sheet(part: str, reference: str) -> str:
    quoted = part.strip().startswith("'")
    core = part.strip().strip("'").strip().replace("''", "'")
    if "!" in core:
        pieces = [p.strip().strip("'").strip() for p in core.split("!")]
        if all(p == pieces[0] for p in pieces) and pieces[0]:
            core = pieces[0]  # the sheet name repeated: 'Sheet1'!'Sheet1'!A1
        elif not quoted or "'!" in core or "!'" in core:
            raise AnswerPositionError(
                f"{reference!r}: two '!' in one reference (quote a sheet name that contains '!')"
            )
    if not core:
        raise AnswerPositionError(f"{reference!r}: empty sheet name")
    return core


def _parse_reference(reference: str) -> tuple[str | None, str]:
    text = reference.strip()
    if "!" not in text:
        if _is_quoted_name(text):
            raise AnswerPositionError(
                f"{reference!r}: quoted sheet name {text} with no range "
                "(expected 'Sheet 1'!A1:B5); not a cell range"
            )
        cell_range = _normalize_range(text, reference)
        if cell_range is None:
            raise AnswerPositionError(
                f"{reference!r}: not a cell range (a quoted sheet needs one: 'Sheet 1'!A1:B5)"
            )
        return None, cell_range
    sheet_part, range_part = text.rsplit("!", 1)
    if not range_part.strip(" '"):
        raise AnswerPositionError(f"{reference!r}: sheet {sheet_part.strip()!r} with no range")
    cell_range = _normalize_range(range_part, reference)
    if cell_range is None:
        raise AnswerPositionError(f"{reference!r}: {range_part.strip()!r} is not a cell range")
    return _parse_sheet(sheet_part, reference), cell_range


def _is_quoted_name(text: str) -> bool:
    """``'Sheet 1'``: a whole piece in closed quotes (a sheet name, never a range)."""
    core = text.strip()
    return (
        len(core) > 1 and core[0] == core[-1] == "'" and core.replace("''", "").count("'") % 2 == 0
    )


def _is_bare_range(text: str) -> bool:
    try:
        return _normalize_range(text, text) is not None
    except AnswerPositionError:
        return False


def parse_answer_position(text: str) -> list[tuple[str | None, str]]:
    """Split a (hand-written, messy) answer_position into (sheet or None, range) pairs.

    None means the answer workbook's first sheet. Ranges come back upper-case
    without ``$``: ``"A1:B5"``, ``"C3"``, ``"A:G"``. A comma splits references
    unless it sits inside a sheet name (the piece before it is then no range
    and has no ``!`` yet, or has an unclosed quote). Raises AnswerPositionError.
    """
    if not isinstance(text, str) or not text.strip():
        raise AnswerPositionError(f"empty answer_position {text!r}")
    normalized = text.translate(_QUOTES).translate(_FULLWIDTH)
    pieces = normalized.split(",")
    references: list[str] = []
    buffer: str | None = None
    for position, piece in enumerate(pieces):
        buffer = piece if buffer is None else f"{buffer},{piece}"
        last = position == len(pieces) - 1
        unclosed = buffer.replace("''", "").count("'") % 2 == 1
        waits_for_sheet = any("!" in later for later in pieces[position + 1 :])
        in_sheet_name = "!" not in buffer and (unclosed or not _is_bare_range(buffer))
        if "!" not in buffer and _is_quoted_name(buffer):
            # A quoted sheet name then a comma: a sheet with no range, never the start
            # of the next reference's sheet name ('Sheet1', 'Sheet2'!A1).
            raise AnswerPositionError(
                f"{text!r}: quoted sheet name {buffer.strip()} with no range "
                "(expected 'Sheet 1'!A1:B5)"
            )
        if not last and buffer.strip() and in_sheet_name and waits_for_sheet:
            continue
        if buffer.strip():
            references.append(buffer)
        buffer = None
    if not references:
        raise AnswerPositionError(f"answer_position {text!r} names no range")
    return [_parse_reference(reference) for reference in references]


def range_cells(cell_range: str, max_row: int = 0) -> list[tuple[int, int]]:
    """(row, column) pairs of a range, column by column as SpreadsheetBench walks it.

    A column-only range (``A:G``) covers rows 1..``max_row`` (the answer sheet's used rows).
    """
    match = _RANGE_RE.match(cell_range)
    if not match:
        raise AnswerPositionError(f"not a normalized range: {cell_range!r}")
    c1, r1, c2, r2 = match.groups()
    if ":" not in cell_range:
        return [(int(r1), _column_number(c1))]
    rows = range(int(r1), int(r2) + 1) if r1 else range(1, max_row + 1)
    return [(r, c) for c in range(_column_number(c1), _column_number(c2) + 1) for r in rows]

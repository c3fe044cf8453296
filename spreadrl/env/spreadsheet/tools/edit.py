"""Editing tools: write_range, format_range, fill_formula, clear_range."""

from __future__ import annotations

import math
import re
from copy import copy
from typing import Any, Literal

from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE, Cell, MergedCell
from openpyxl.formula.translate import Translator, TranslatorError
from openpyxl.styles import Alignment, Border, Font, PatternFill, Side
from pydantic import Field

from spreadrl.data.jsontypes import JSONValue
from spreadrl.env.spreadsheet.tools.base import Tool, ToolContext
from spreadrl.env.spreadsheet.tools.common import Args, check_cap
from spreadrl.env.spreadsheet.workbook import CellRange, ToolError, column_letter

_HEX = re.compile(r"^#?([0-9A-Fa-f]{6}|[0-9A-Fa-f]{8})$")


def _is_merged(cell: Cell | MergedCell) -> bool:
    return isinstance(cell, MergedCell)


def _matrix(values: JSONValue) -> list[list[JSONValue]]:
    """A scalar, a row, or rows -> rows."""
    if not isinstance(values, list):
        return [[values]]
    if not values:
        raise ToolError("values is an empty list; give a value, a row, or a list of rows")
    kinds = {isinstance(v, list) for v in values}
    if kinds == {False}:
        return [values]
    if kinds != {True}:
        raise ToolError("values mixes rows (lists) and single values; give a list of rows")
    if any(not row for row in values):
        raise ToolError("values holds an empty row; every row needs at least one value")
    return values


def _check_value(value: JSONValue, where: str) -> None:
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and ILLEGAL_CHARACTERS_RE.search(value):
            raise ToolError(f"the value for {where} holds control characters Excel cannot store")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError(f"the value for {where} is not a finite number")
        return
    raise ToolError(
        f"the value for {where} is a {type(value).__name__}; cell values are numbers, text, "
        "booleans, formulas ('=...'), null (leave as is) or '' (clear)"
    )


class WriteArgs(Args):
    range: str = Field(
        description="Target range, e.g. 'Sheet1!B2:D4' (a single cell grows to fit a list of rows)."
    )
    values: Any = Field(
        description=(
            "A scalar (written to every cell), a list (one row, repeated down the range) or a "
            "list of rows. Strings starting with '=' are formulas; null leaves a cell as it is; "
            "'' clears it."
        )
    )


def write_range(ctx: ToolContext, args: WriteArgs) -> str:
    done = write_values(ctx, ctx.book.parse_range(args.range), args.values)
    return (
        f"wrote {done['range']}: {done['values']} values, {done['formulas']} formulas, "
        f"{done['cleared']} cleared, {done['skipped']} left as they were"
    )


def write_values(
    ctx: ToolContext, target: CellRange, values: JSONValue, *, literal_text: bool = False
) -> dict[str, Any]:
    """Write a scalar, a row or rows into ``target`` (both tool presets' write_range).

    A one-cell target grows to fit the rows; one row or one value repeats over
    the target; None leaves a cell, ``""`` clears it. ``literal_text`` stores
    every string as text (a string starting with ``=`` is not a formula).
    Returns the written range and counts.
    """
    book = ctx.book
    rows = _matrix(values)
    widths = {len(row) for row in rows}
    if target.size == 1 and (len(rows) > 1 or max(widths) > 1):
        if len(widths) > 1:
            raise ToolError("rows of values have different lengths; give rows of equal length")
        target = CellRange(
            target.sheet, target.min_row, target.min_col,
            target.min_row + len(rows) - 1, target.min_col + widths.pop() - 1,
        )  # fmt: skip
    if len(rows) not in (1, target.rows):
        raise ToolError(
            f"values has {len(rows)} rows but {target.a1()} has {target.rows}; give 1 row "
            f"(repeated) or {target.rows}"
        )
    for i, row in enumerate(rows):
        if len(row) not in (1, target.cols):
            raise ToolError(
                f"row {i + 1} of values has {len(row)} values but {target.a1()} has "
                f"{target.cols} columns; give 1 value (repeated) or {target.cols}"
            )
    check_cap(target, ctx.config.max_write_cells, "write_range")
    ws = book.wb[target.sheet]
    plan = []
    for i in range(target.rows):
        row = rows[i if len(rows) > 1 else 0]
        for j in range(target.cols):
            value = row[j if len(row) > 1 else 0]
            r, c = target.min_row + i, target.min_col + j
            where = f"{column_letter(c)}{r}"
            _check_value(value, where)
            if value is None:
                continue
            if _is_merged(ws.cell(r, c)):
                raise ToolError(f"{where} is inside a merged range; write to its top-left cell")
            plan.append((r, c, value))
    counts = {"value": 0, "formula": 0, "cleared": 0}
    for r, c, value in plan:
        cell = ws.cell(r, c)
        if value == "":
            cell.value = None
            cell.number_format = "General"  # a cleared date cell would read back as a time
            counts["cleared"] += 1
        else:
            cell.value = value
            if literal_text and isinstance(value, str):
                cell.data_type = "s"  # text even when it starts with '='
                counts["value"] += 1
            else:
                formula = isinstance(value, str) and value.startswith("=")
                counts["formula" if formula else "value"] += 1
    book.touch()
    return {
        "range": target.a1(),
        "values": counts["value"],
        "formulas": counts["formula"],
        "cleared": counts["cleared"],
        "skipped": target.size - len(plan),
    }


class FormatArgs(Args):
    range: str = Field(description="Range to format.")
    number_format: str | None = Field(
        None, description="Excel number format, e.g. '0.00%', 'yyyy-mm-dd'."
    )
    bold: bool | None = Field(None, description="Bold font.")
    italic: bool | None = Field(None, description="Italic font.")
    font_color: str | None = Field(None, description="Font colour as hex RGB, e.g. 'FF0000'.")
    fill_color: str | None = Field(None, description="Background fill as hex RGB, e.g. 'FFFF00'.")
    horizontal_alignment: Literal["general", "left", "center", "right", "justify"] | None = Field(
        None, description="Horizontal alignment."
    )
    column_width: float | None = Field(
        None, description="Width of the range's columns (characters)."
    )


_COLOR_NAMES = {
    "black": "000000", "white": "FFFFFF", "red": "FF0000", "green": "008000",
    "blue": "0000FF", "yellow": "FFFF00", "orange": "FFA500", "purple": "800080",
    "gray": "808080", "grey": "808080", "lightgray": "D3D3D3", "lightgrey": "D3D3D3",
    "darkgray": "A9A9A9", "darkgrey": "A9A9A9", "pink": "FFC0CB", "brown": "A52A2A",
    "cyan": "00FFFF", "magenta": "FF00FF", "lightblue": "ADD8E6", "lightgreen": "90EE90",
    "darkblue": "00008B", "darkgreen": "006400", "darkred": "8B0000", "navy": "000080",
}  # fmt: skip
FORMAT_OPTIONS = (
    "number_format", "bold", "italic", "underline", "font_color", "fill_color",
    "horizontal_alignment", "vertical_alignment", "wrap_text", "shrink_to_fit",
    "text_rotation", "border_style", "border_color", "row_height", "column_width",
)  # fmt: skip
_BORDER_STYLES = (
    "thin", "medium", "thick", "dashed", "dotted", "double", "hair", "mediumDashed",
    "dashDot", "mediumDashDot", "dashDotDot", "mediumDashDotDot", "slantDashDot",
)  # fmt: skip


def _color(text: str, name: str, names: bool = False) -> str:
    named = _COLOR_NAMES.get(text.strip().lower().replace(" ", "")) if names else None
    if named:
        return "FF" + named
    match = _HEX.match(text.strip())
    if not match:
        raise ToolError(f"{name} {text!r} is not a hex colour; use RGB like 'FF0000' or '#FF0000'")
    value = match.group(1).upper()
    return value if len(value) == 8 else "FF" + value


def format_range(ctx: ToolContext, args: FormatArgs) -> str:
    changes = args.model_dump(exclude={"range"}, exclude_none=True)
    if not changes:
        raise ToolError(
            "nothing to format; pass any of number_format, bold, italic, font_color, "
            "fill_color, horizontal_alignment, column_width"
        )
    target = ctx.book.parse_range(args.range)
    apply_format(ctx, target, changes)
    return f"formatted {target.a1()} ({target.size} cells): " + ", ".join(
        f"{k}={v!r}" for k, v in changes.items()
    )


def apply_format(
    ctx: ToolContext, target: CellRange, options: dict[str, Any], *, color_names: bool = False
) -> None:
    """Apply ``options`` (names in :data:`FORMAT_OPTIONS`) to ``target``: both presets' format_range.

    Merged placeholders are skipped; row heights and column widths apply to the
    rows and columns the range touches; ``color_names`` also accepts common colour
    names ("red") beside hex RGB. Raises ToolError for a bad value before
    any cell changes.
    """
    unknown = sorted(set(options) - set(FORMAT_OPTIONS))
    if unknown:
        raise ToolError(f"unknown format options {unknown}; known: {', '.join(FORMAT_OPTIONS)}")
    check_cap(target, ctx.config.max_write_cells, "format_range")
    get = options.get
    font_color = _color(get("font_color"), "font_color", color_names) if get("font_color") else None
    fill_color = _color(get("fill_color"), "fill_color", color_names) if get("fill_color") else None
    border_color = (
        _color(get("border_color"), "border_color", color_names) if get("border_color") else None
    )
    border_style = get("border_style") or ("thin" if border_color else None)
    if border_style is not None and border_style not in _BORDER_STYLES:
        raise ToolError(f"border_style {border_style!r} is not one of {', '.join(_BORDER_STYLES)}")
    rotation = get("text_rotation")
    if rotation is not None and not (0 <= rotation <= 180 or rotation == 255):
        raise ToolError("text_rotation must be 0-180, or 255 for stacked text")
    for key, top in (("column_width", 255), ("row_height", 409)):
        if get(key) is not None and not 0 <= get(key) <= top:
            raise ToolError(f"{key} must be between 0 and {top}")
    font_keys = ("bold", "italic", "underline")
    align_keys = {
        "horizontal_alignment": "horizontal",
        "vertical_alignment": "vertical",
        "wrap_text": "wrap_text",
        "shrink_to_fit": "shrink_to_fit",
        "text_rotation": "text_rotation",
    }
    ws = ctx.book.wb[target.sheet]
    for r, c in target.coordinates():
        cell = ws.cell(r, c)
        if _is_merged(cell):
            continue
        if get("number_format") is not None:
            cell.number_format = get("number_format")
        if font_color or any(get(k) is not None for k in font_keys):
            font: Font = copy(cell.font)
            if get("bold") is not None:
                font.bold = get("bold")
            if get("italic") is not None:
                font.italic = get("italic")
            if get("underline") is not None:
                font.underline = "single" if get("underline") else None
            if font_color:
                font.color = font_color
            cell.font = font
        if fill_color:
            cell.fill = PatternFill(fill_type="solid", start_color=fill_color, end_color=fill_color)
        if any(get(k) is not None for k in align_keys):
            alignment: Alignment = copy(cell.alignment)
            for key, attr in align_keys.items():
                if get(key) is not None:
                    setattr(alignment, attr, get(key))
            cell.alignment = alignment
        if border_style:
            side = Side(style=border_style, color=border_color)
            cell.border = Border(left=side, right=side, top=side, bottom=side)
    if get("column_width") is not None:
        for c in range(target.min_col, target.max_col + 1):
            ws.column_dimensions[column_letter(c)].width = get("column_width")
    if get("row_height") is not None:
        for r in range(target.min_row, target.max_row + 1):
            ws.row_dimensions[r].height = get("row_height")
    ctx.book.touch()


class FillArgs(Args):
    source: str = Field(description="One cell holding a formula, e.g. 'Sheet1!C2'.")
    target: str = Field(
        description="Range to fill, e.g. 'C3:C100' (same sheet as source or another)."
    )


def fill_formula(ctx: ToolContext, args: FillArgs) -> str:
    book = ctx.book
    source = book.parse_range(args.source)
    if source.size != 1:
        raise ToolError(f"source must be one cell, got {source.a1()}; e.g. source='C2'")
    formula = book.wb[source.sheet]._cells.get((source.min_row, source.min_col))
    formula = None if formula is None else formula.value
    if not (isinstance(formula, str) and formula.startswith("=")):
        raise ToolError(
            f"{source.a1()} holds {formula!r}, not a formula; write one there with write_range first"
        )
    target = book.parse_range(args.target)
    origin = f"{column_letter(source.min_col)}{source.min_row}"
    plan = fill_cells(ctx, formula, origin, target)
    last = plan[-1][2]
    return (
        f"filled {target.a1()} ({len(plan)} cells) from {source.a1()} {formula}; last cell: {last}"
    )


def fill_cells(
    ctx: ToolContext, formula: str, origin: str, target: CellRange, *, skip_merged: bool = False
) -> list[tuple[int, int, str]]:
    """Write ``formula`` (written for cell ``origin``) into every cell of ``target``.

    Relative references move as Excel's fill moves them, ``$`` parts stay: both
    presets' fill_formula. Every cell is translated before any is written, so a
    bad formula changes nothing. Merged placeholders are an error, or skipped
    with ``skip_merged``. Returns ``(row, column, formula)`` per written cell.
    """
    book = ctx.book
    check_cap(target, ctx.config.max_write_cells, "fill_formula")
    ws = book.wb[target.sheet]
    plan = []
    for r, c in target.coordinates():
        if _is_merged(ws.cell(r, c)):
            if skip_merged:
                continue
            raise ToolError(f"{column_letter(c)}{r} is inside a merged range")
        try:
            text = Translator(formula, origin=origin).translate_formula(f"{column_letter(c)}{r}")
        except (TranslatorError, ValueError) as exc:
            raise ToolError(
                f"cannot translate {formula!r} to {column_letter(c)}{r} ({exc})"
            ) from None
        plan.append((r, c, text))
    if not plan:
        raise ToolError(f"{target.a1()} holds only merged placeholders; nothing to fill")
    for r, c, text in plan:
        ws.cell(r, c).value = text
    book.touch()
    return plan


class ClearArgs(Args):
    range: str = Field(description="Range whose values (and number formats) are cleared.")


def clear_range(ctx: ToolContext, args: ClearArgs) -> str:
    target = ctx.book.parse_range(args.range, clip=True)
    cleared = clear_cells(ctx, target)
    return f"cleared {target.a1()}: {cleared} non-empty cells emptied"


def clear_cells(ctx: ToolContext, target: CellRange) -> int:
    """Empty the cells of ``target`` (values and number formats): both presets' clear_range.

    Merged placeholders are left alone; returns how many non-empty cells were emptied.
    """
    book = ctx.book
    cells = book.wb[target.sheet]._cells
    cleared = 0
    for (r, c), cell in list(cells.items()):
        if not (target.min_row <= r <= target.max_row and target.min_col <= c <= target.max_col):
            continue
        if _is_merged(cell):
            continue
        if cell.value is not None:
            cleared += 1
        cell.value = None
        cell.number_format = "General"
    book.touch()
    return cleared


TOOLS = [
    Tool(
        "write_range",
        "Write values or formulas into a range. A scalar fills the range, one row repeats down "
        "it, a list of rows maps cell by cell; null leaves a cell, '' clears it.",
        WriteArgs,
        write_range,
    ),
    Tool(
        "format_range",
        "Set number format, font (bold, italic, colour), fill colour, alignment or column width.",
        FormatArgs,
        format_range,
    ),
    Tool(
        "fill_formula",
        "Copy a formula from one cell over a range, translating relative references as "
        "Excel's fill does ($-anchored parts stay).",
        FillArgs,
        fill_formula,
    ),
    Tool("clear_range", "Empty every cell of a range.", ClearArgs, clear_range),
]

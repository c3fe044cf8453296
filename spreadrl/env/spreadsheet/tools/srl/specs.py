"""The spreadsheet-rl tools' argument schemas, as data: upstream's facts, this project's words.

Each entry is (name, description, properties, required). The facts (names, order,
types, enums, item types, required) equal upstream's ``configs/tool/spreadsheet_tools.yaml``
(``tests/fixtures/spreadsheet_rl_tools.json``); the descriptions are this project's.
"""

from __future__ import annotations

from typing import Any

_PATH = {"type": "string", "description": "Workbook file, relative; omit it for data.xlsx."}


def _sheet(what: str) -> dict[str, Any]:
    return {"type": "string", "description": what}


_SHEET_FOR_RANGE = _sheet(
    "Sheet of an unqualified range (omit it when the range names its sheet); default: first sheet."
)

# (name, description, properties, required): upstream's facts, this project's descriptions
_SPECS: list[tuple[str, str, dict[str, dict[str, Any]], list[str]]] = [
    (
        "inspect_range",
        "Read A1 ranges. mode=cells lists each non-empty cell with its value and formula; "
        "mode=summary counts contents without listing values.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {
                "type": "string",
                "description": "An A1 range, or up to 20 separated by commas. cells mode lists up "
                "to 400 cells per range and says where to continue (omitted_from) when cut; "
                "summary mode scans up to 100000 cells per call.",
            },
            "include_details": {
                "type": "boolean",
                "description": "cells mode only: add number formats, styles and merged ranges. "
                "Default false.",
            },
            "mode": {
                "type": "string",
                "enum": ["cells", "summary"],
                "description": "cells (default): address/value/formula records; summary: counts "
                "of non-empty, empty, formula and error cells and the non-empty fraction.",
            },
        },
        ["range"],
    ),
    (
        "list_sheets",
        "List the sheets: name, position, visibility, whether active, used dimensions. Needed "
        "only when the sheets are unknown or after changing them.",
        {"path": _PATH},
        [],
    ),
    (
        "manage_sheet",
        "Create, rename, delete, copy, move, hide or unhide a sheet; index is the 0-based final "
        "position for create/copy/move. The last visible sheet cannot be deleted or hidden; a "
        "rename does not rewrite formulas. Answers with the sheets in order.",
        {
            "path": _PATH,
            "action": {
                "type": "string",
                "enum": ["create", "rename", "delete", "copy", "move", "hide", "unhide"],
            },
            "sheet_name": _sheet("The sheet to act on; for create, the new sheet's name."),
            "new_name": _sheet("New name: required for rename, optional for copy."),
            "index": {
                "type": "integer",
                "description": "0-based final position for create/copy/move; move needs it.",
            },
        },
        ["action", "sheet_name"],
    ),
    (
        "find_cells",
        "Search cell values and/or formulas for text; answers with the matching addresses "
        "(matches_csv), and the matched text with include_values.",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet to search (omit it when range names its sheet); default: every sheet."
            ),
            "query": {
                "type": "string",
                "description": "Text, or a simple regex (no groups, |, +, ? or {m,n}); it cannot "
                "find blank cells: inspect the range for those.",
            },
            "match": {
                "type": "string",
                "enum": ["contains", "equals", "prefix", "regex"],
                "description": "How the query matches. Default contains.",
            },
            "search_in": {
                "type": "string",
                "enum": ["values", "formulas", "both"],
                "description": "Where to look. Default values.",
            },
            "case_sensitive": {"type": "boolean", "description": "Default false."},
            "include_values": {
                "type": "boolean",
                "description": "Also return the matched values/formulas. Default false.",
            },
            "return": {
                "type": "string",
                "enum": ["first", "all"],
                "description": "The first match or all of them. Default first.",
            },
            "max_results": {
                "type": "integer",
                "description": "Most matches returned with return=all. Default 20.",
            },
            "range": {
                "type": "string",
                "description": "A1 range to search; default: each sheet's used area.",
            },
        },
        ["query"],
    ),
    (
        "write_range",
        "Write static values (a formula string is refused: use fill_formula). A one-cell range "
        "is the top-left corner of the data; a scalar, a row or a column repeats over the range. "
        "A missing sheet is created. Formulas that depend on the cells are recalculated later.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {"type": "string", "description": "Target cell or rectangle, A1."},
            "data": {
                "type": ["array", "string", "number", "boolean"],
                "description": "A scalar, one row, or a list of rows matching the rectangle (or "
                "starting at a single cell). null leaves a cell, an empty string clears it, a "
                "leading apostrophe keeps text as text.",
            },
        },
        ["range", "data"],
    ),
    (
        "format_range",
        "Format the cells, rows and columns of an A1 range; answers with what was applied. "
        "Unknown options are refused.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {"type": "string", "description": "A1 range."},
            "fill_color": {
                "type": "string",
                "description": "Background colour: #RRGGBB, RRGGBB, AARRGGBB or a name (red).",
            },
            "font_color": {
                "type": "string",
                "description": "Font colour: #RRGGBB, RRGGBB, AARRGGBB or a name (red).",
            },
            "bold": {"type": "boolean", "description": "Bold on or off."},
            "italic": {"type": "boolean", "description": "Italic on or off."},
            "underline": {"type": "boolean", "description": "Single underline on or off."},
            "number_format": {
                "type": "string",
                "description": "Excel number format, e.g. 0.00% or yyyy-mm-dd.",
            },
            "horizontal_alignment": {
                "type": "string",
                "enum": [
                    "general",
                    "left",
                    "center",
                    "right",
                    "fill",
                    "justify",
                    "centerContinuous",
                    "distributed",
                ],
            },
            "vertical_alignment": {
                "type": "string",
                "enum": ["top", "center", "bottom", "justify", "distributed"],
            },
            "wrap_text": {"type": "boolean", "description": "Wrap text on or off."},
            "shrink_to_fit": {"type": "boolean", "description": "Shrink text to the cell width."},
            "text_rotation": {
                "type": "integer",
                "description": "Rotation 0-180 degrees, or 255 for stacked text.",
            },
            "border_style": {
                "type": "string",
                "description": "Border on all sides: thin, medium, thick, dashed, dotted, ...",
            },
            "border_color": {
                "type": "string",
                "description": "Border colour (hex or name); thin borders unless border_style.",
            },
            "row_height": {
                "type": "number",
                "description": "Height of the rows the range touches.",
            },
            "column_width": {
                "type": "number",
                "description": "Width of the columns the range touches.",
            },
        },
        ["range"],
    ),
    (
        "fill_formula",
        "Fill one formula over a rectangle, relative references moving row by row and column "
        "by column; for formulas only. A bad formula is refused. The workbook is recalculated "
        "before the change is kept, and a failure leaves it unchanged, so no recalculation is "
        "needed afterwards. Merged placeholders are skipped; answers with samples.",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet of an unqualified start_cell (omit it when start_cell names its sheet); "
                "default: first sheet."
            ),
            "start_cell": {
                "type": "string",
                "description": "First cell, A1 (D2 or Sheet1!D2); the formula is written for it.",
            },
            "end_row": {
                "type": "integer",
                "description": "Last row to fill (inclusive); default: start_cell's row.",
            },
            "end_col": {
                "type": "string",
                "description": "Last column to fill (inclusive), a letter like H; default: "
                "start_cell's column.",
            },
            "formula_template": {
                "type": "string",
                "description": "The formula for start_cell, beginning with = (not a formula "
                "wrapped in quotes). Other sheets as 'Sheet Name'!$A$1.",
            },
        },
        ["start_cell", "formula_template"],
    ),
    (
        "clear_range",
        "Empty values and formulas without moving cells (delete_rows/delete_columns move them). "
        "Takes a cell, a rectangle, whole rows or whole columns; answers with how many cells "
        "changed.",
        {
            "path": _PATH,
            "sheet_name": _SHEET_FOR_RANGE,
            "range": {
                "type": "string",
                "description": "A1 cell, rectangle, rows (2:5) or columns.",
            },
        },
        ["range"],
    ),
    (
        "delete_rows",
        "Delete rows; the rows below move up and formulas follow them (clear_range empties "
        "without moving).",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet of unqualified rows (omit it when they name their sheet); default: first "
                "sheet."
            ),
            "rows": {
                "type": "array",
                "description": "Rows to delete, e.g. ['2:3'], ['3', '5', '7:9'] or "
                "['Sheet1!5:10']; one range is a one-item list.",
                "items": {"type": "string"},
            },
        },
        ["rows"],
    ),
    (
        "delete_columns",
        "Delete columns; the columns to the right move left and formulas follow them "
        "(clear_range empties without moving).",
        {
            "path": _PATH,
            "sheet_name": _sheet(
                "Sheet of unqualified columns (omit it when they name their sheet); default: "
                "first sheet."
            ),
            "columns": {
                "type": "array",
                "description": "Columns to delete, e.g. ['B:D'], ['B', 'D', 'F:G'] or "
                "['Sheet1!A:C']; one range is a one-item list.",
                "items": {"type": "string"},
            },
        },
        ["columns"],
    ),
    (
        "recalculate_and_read",
        "Recalculate the workbook and read ranges: small ranges as a matrix, large ones as "
        "addressed samples.",
        {
            "path": _PATH,
            "cell_ranges": {
                "type": "array",
                "description": "A1 ranges to read after recalculating.",
                "items": {"type": "string"},
            },
        },
        ["cell_ranges"],
    ),
    (
        "code_interpreter",
        "Run Python (a fresh process each call); the workbook is data/data.xlsx.",
        {"code": {"type": "string", "description": "The Python source to run."}},
        ["code"],
    ),
]


def _schema(
    name: str, description: str, props: dict[str, dict[str, Any]], required: list[str]
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


SCHEMAS: dict[str, dict[str, Any]] = {spec[0]: _schema(*spec) for spec in _SPECS}
STRICT = frozenset({"format_range"})  # upstream refuses unknown parameters only here

PARALLEL_SAFE = frozenset({"inspect_range", "list_sheets", "find_cells"})  # upstream's yaml

# ---- the June 2026 scaffold's copy_range (upstream's yaml at commit 5335ee0b) ------------------
COPY_RANGE_SCHEMA = _schema(
    "copy_range",
    "Copy one rectangle of cells with its values or formulas, styles, comments and links; "
    "relative references move with the copy. The destination is a top-left cell, a range of the "
    "same shape, or any range when the source is one cell. Nothing is recalculated.",
    {
        "path": _PATH,
        "sheet_name": _sheet(
            "Sheet of both ranges when they name none (source_sheet_name and "
            "destination_sheet_name override it)."
        ),
        "source_sheet_name": _sheet(
            "Sheet of the source; a sheet named in source_range must match."
        ),
        "destination_sheet_name": _sheet(
            "Sheet of the destination; a sheet named in destination_range must match. "
            "Default: the source's sheet."
        ),
        "source_range": {
            "type": "string",
            "description": "One finite A1 rectangle, e.g. A1:C3 or Sheet1!B2:D10.",
        },
        "destination_range": {
            "type": "string",
            "description": "Top-left cell, a same-shaped range, or a larger range for a one-cell "
            "source, e.g. E1 or Sheet2!E1:G3.",
        },
    },
    ["source_range", "destination_range"],
)

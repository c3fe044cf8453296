"""The tool registry: schemas generated from the argument models, presets, name errors."""

from __future__ import annotations

import pytest

from spreadrl.env.spreadsheet.tools import PRESETS, TOOLS, resolve_tools, tool_schemas
from spreadrl.errors import SpreadrlError

DOCUMENTED_ARGUMENTS = {  # docs/tools.md
    "list_sheets": set(),
    "inspect_range": {"ranges", "mode", "cursor", "max_cells"},
    "manage_sheet": {"action", "sheet", "new_name"},
    "find_cells": {"query", "regex", "sheet", "match_case", "max_results"},
    "write_range": {"range", "values"},
    "format_range": {
        "range",
        "number_format",
        "bold",
        "italic",
        "font_color",
        "fill_color",
        "horizontal_alignment",
        "column_width",
    },  # fmt: skip
    "fill_formula": {"source", "target"},
    "clear_range": {"range"},
    "delete_rows": {"start_row", "count", "sheet"},
    "delete_columns": {"start_column", "count", "sheet"},
    "recalculate_and_read": {"ranges"},
    "code_interpreter": {"code"},
    "copy_range": {"source", "destination"},
}


def test_full_preset_has_the_twelve_tools_with_documented_arguments():
    schemas = tool_schemas("full")
    names = [s["function"]["name"] for s in schemas]
    assert names == [n for n in TOOLS if n != "copy_range"] and len(schemas) == 12
    for schema in [*schemas, *tool_schemas(["copy_range"])]:
        fn = schema["function"]
        assert schema["type"] == "function" and fn["description"]
        props = set(fn["parameters"]["properties"])
        assert DOCUMENTED_ARGUMENTS[fn["name"]] <= props, fn["name"]
        assert fn["parameters"]["type"] == "object"
        assert "title" not in fn["parameters"]


def test_schema_required_fields_match_the_argument_models():
    for tool in TOOLS.values():
        required = set(tool.schema()["function"]["parameters"]["required"])
        model_required = {n for n, f in tool.args.model_fields.items() if f.is_required()}
        assert required == model_required, tool.name
    write = TOOLS["write_range"].schema()["function"]["parameters"]
    assert write["required"] == ["range", "values"]
    assert TOOLS["find_cells"].schema()["function"]["parameters"]["properties"]["sheet"][
        "type"
    ] == [
        "string",
        "null",
    ]


def test_presets_lists_and_unknown_names():
    assert [t.name for t in resolve_tools("minimal")] == list(PRESETS["minimal"])
    assert [t.name for t in resolve_tools(["full"])] == list(PRESETS["full"])
    assert [t.name for t in resolve_tools("write_range, list_sheets")] == [
        "write_range",
        "list_sheets",
    ]
    with pytest.raises(SpreadrlError, match="unknown tool or preset 'write_cells'.*minimal, full"):
        resolve_tools(["write_cells"])
    with pytest.raises(SpreadrlError, match="empty"):
        resolve_tools([])


def test_arguments_as_json_text_are_parsed(tmp_path):
    from spreadrl.env.spreadsheet.tools import ToolError
    from tests.env.spreadsheet.gym_helpers import make_ctx

    ctx = make_ctx(tmp_path)
    assert "Sheet1" in TOOLS["list_sheets"].call(ctx, "")
    assert "A1" in TOOLS["inspect_range"].call(ctx, '{"ranges": ["A1"]}')
    with pytest.raises(ToolError, match="not valid JSON"):
        TOOLS["inspect_range"].call(ctx, "{ranges: A1}")
    with pytest.raises(ToolError, match="must be a JSON object, got list"):
        TOOLS["inspect_range"].call(ctx, ["A1"])

"""The spreadsheet-rl preset: upstream's tool schemas, field by field, over the gym's behaviour."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import openpyxl
import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.env.spreadsheet.tools import SRL_TOOLS, TOOLS, ToolError, resolve_tools, srl
from spreadrl.env.types import ToolCall
from spreadrl.errors import ConfigError, SpreadrlError
from tests.env.spreadsheet.gym_helpers import make_ctx, make_task, sales_book

FACTS = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "spreadsheet_rl_tools.json").read_text()
)["tools"]


def run(ctx: Any, name: str, **arguments: Any) -> dict[str, Any]:
    return json.loads(SRL_TOOLS[name].call(ctx, arguments))


def refused(ctx: Any, name: str, **arguments: Any) -> dict[str, Any]:
    with pytest.raises(ToolError) as info:
        SRL_TOOLS[name].call(ctx, arguments)
    reply = json.loads(info.value.observation)
    assert reply["status"] == "error" and reply["truncated"] is False
    return reply


def value(ctx: Any, ref: str, sheet: str = "Sheet1") -> Any:
    return ctx.book.wb[sheet][ref].value


# ---- the schemas are upstream's, field by field -------------------------------------------------
def test_preset_schemas_equal_the_upstream_yaml_facts():
    schemas = [t.schema() for t in resolve_tools("spreadsheet-rl")]
    assert [s["function"]["name"] for s in schemas] == [f["name"] for f in FACTS]
    for schema, facts in zip(schemas, FACTS, strict=True):
        assert schema["type"] == "function"
        fn = schema["function"]
        assert fn["description"].strip()
        params = fn["parameters"]
        assert params["type"] == "object"
        assert params["required"] == facts["required"], fn["name"]
        got = []
        for name, prop in params["properties"].items():
            assert set(prop) <= {"type", "enum", "items", "description"}, (fn["name"], name)
            item = prop.get("items", {}).get("type")
            got.append([name, prop["type"], prop.get("enum"), item, "description" in prop])
        assert got == facts["properties"], fn["name"]


def test_read_only_tools_and_response_caps_follow_the_yaml_config():
    for facts in FACTS:
        assert SRL_TOOLS[facts["name"]].parallel_safe is facts["parallel_safe"]
    caps = {f["name"]: f["max_response_chars"] for f in FACTS if f["max_response_chars"]}
    assert caps.pop("inspect_range") == srl.INSPECT_RESPONSE_CHARS
    assert set(caps.values()) == {srl.MAX_RESPONSE_CHARS}


def test_the_arguments_model_accepts_what_the_schema_advertises():
    for tool in SRL_TOOLS.values():
        params = tool.schema()["function"]["parameters"]
        fields = {f.alias or name: f for name, f in tool.args.model_fields.items()}
        assert list(fields) == list(params["properties"]), tool.name
        assert [n for n, f in fields.items() if f.is_required()] == params["required"]


def test_the_preset_stands_alone_and_spreadrls_set_stays_the_default():
    assert EnvConfig().tools == "full"
    assert resolve_tools("full") == [TOOLS[n] for n in TOOLS if n != "copy_range"]
    assert EnvConfig(tools=["spreadsheet-rl"]).tools == "spreadsheet-rl"
    with pytest.raises(SpreadrlError, match="use it alone"):
        resolve_tools(["spreadsheet-rl", "write_range"])
    spreadrl_write = TOOLS["write_range"].schema()["function"]["parameters"]["properties"]
    assert "values" in spreadrl_write and "data" not in spreadrl_write


def test_both_presets_write_through_one_implementation(tmp_path, monkeypatch):
    from spreadrl.env.spreadsheet.tools import edit

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ToolError("shared write path")

    assert srl.edit.write_values is edit.write_values  # the preset imports the gym's own writer
    monkeypatch.setattr(edit, "write_values", broken)
    monkeypatch.setattr(srl.edit, "write_values", broken)
    ctx = make_ctx(tmp_path)
    with pytest.raises(ToolError, match="shared write path"):
        TOOLS["write_range"].call(ctx, {"range": "A1", "values": 1})
    assert refused(ctx, "write_range", range="A1", data=1)["message"] == "shared write path"


# ---- behaviour ----------------------------------------------------------------------------------
def test_inspect_range_lists_every_cell_with_value_and_formula(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.book.wb["Sheet1"]["D2"] = "=B2*C2"
    ctx.book.touch()
    reply = run(ctx, "inspect_range", range="B2:D2, 'My Notes'!A1:B2")
    first, notes = reply["ranges"]
    assert first["cells"] == [
        {"address": "B2", "value": 10},
        {"address": "C2", "value": 2.5},
        {"address": "D2", "value": 25, "formula": "=B2*C2"},
    ]
    assert [c["address"] for c in notes["cells"]] == ["A1", "B2"]
    summary = run(ctx, "inspect_range", range="A1:D6", mode="summary")["ranges"][0]
    assert (summary["non_empty"], summary["empty"], summary["formulas"]) == (19, 5, 1)
    assert refused(ctx, "inspect_range", range="A1", mode="summary", include_details=True)


def test_inspect_range_fits_10240_characters_and_says_where_to_continue(tmp_path):
    wb = openpyxl.Workbook()
    for r in range(1, 301):
        wb.active.append([f"row {r} " + "x" * 40, r])
    wb.save(tmp_path / "big.xlsx")
    ctx = make_ctx(tmp_path, book=tmp_path / "big.xlsx")
    text = SRL_TOOLS["inspect_range"].call(ctx, {"range": "A1:B300"})
    assert len(text) <= srl.INSPECT_RESPONSE_CHARS
    block = json.loads(text)["ranges"][0]
    kept = len(block["cells"])
    assert 0 < kept < 600 and block["omitted_cells"] == 600 - kept
    next_cell = ["A", "B"][kept % 2] + str(kept // 2 + 1)
    assert block["omitted_from"] == next_cell
    listing = SRL_TOOLS["find_cells"].call(
        ctx, {"query": "row", "return": "all", "max_results": 300}
    )
    assert len(listing) <= srl.MAX_RESPONSE_CHARS and json.loads(listing)["total_matches"] == 300


def test_write_range_takes_data_and_refuses_formulas(tmp_path):
    ctx = make_ctx(tmp_path)
    reply = run(ctx, "write_range", range="E1", data=[["Total"], ["'=literal"], [None], [5]])
    assert reply["range"] == "Sheet1!E1:E4" and reply["written_cells"] == 3
    assert value(ctx, "E2") == "=literal" and ctx.book.wb["Sheet1"]["E2"].data_type == "s"
    assert value(ctx, "E4") == 5
    error = refused(ctx, "write_range", range="F1", data=[[1, "=SUM(A1:A3)"]])
    assert error["error"] == "formula_rejected" and value(ctx, "F1") is None
    assert run(ctx, "write_range", range="B2", sheet_name="New sheet", data=7)["created_sheet"]
    assert value(ctx, "B2", "New sheet") == 7


def test_fill_formula_recalculates_before_commit_and_rolls_back(tmp_path):
    ctx = make_ctx(tmp_path)
    reply = run(ctx, "fill_formula", start_cell="D2", end_row=6, formula_template="=B2*C2")
    assert reply["range"] == "Sheet1!D2:D6" and reply["filled_cells"] == 5
    assert reply["recalculated"] is True
    assert [s["value"] for s in reply["samples"]] == [25, 12, 10.5, 6]
    assert value(ctx, "D6") == "=B6*C6"
    wide = run(
        ctx, "fill_formula", start_cell="E2", end_row=3, end_col="F", formula_template="=$B2+1"
    )
    assert wide["filled_cells"] == 4 and value(ctx, "F3") == "=$B3+1"
    before = ctx.book.version
    bad = refused(ctx, "fill_formula", start_cell="G2", end_row=6, formula_template="=NOPE(B2)")
    assert bad["error"] == "invalid_formula" and "unchanged" in bad["message"]
    assert all(value(ctx, f"G{r}") is None for r in range(2, 7))
    assert value(ctx, "D6") == "=B6*C6" and ctx.book.version > before
    assert refused(ctx, "fill_formula", start_cell="G2", formula_template='="=SUM(A1)"')
    assert refused(ctx, "fill_formula", start_cell="G2", formula_template="B2*2")


def test_delete_rows_and_columns_take_lists_of_ranges(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.book.wb["Sheet1"]["E7"] = "=SUM(B2:B6)"
    reply = run(ctx, "delete_rows", rows=["3", "5:6"])
    assert reply["deleted_rows"] == {"Sheet1": ["3", "5:6"]} and reply["deleted_rows_count"] == 3
    assert [value(ctx, f"A{r}") for r in (2, 3)] == ["North", "East"]
    assert value(ctx, "E4") == "=SUM(B2:B3)"  # references follow, as Excel's delete does
    run(ctx, "delete_columns", columns=["'My Notes'!A"])
    assert value(ctx, "A2", "My Notes") == "Apple juice"
    assert refused(ctx, "delete_rows", rows=["x"])["error"] == "invalid_range"
    assert refused(ctx, "delete_rows", rows=["1:20000"])["error"] == "too_many"


def test_manage_sheet_moves_hides_and_keeps_one_sheet_visible(tmp_path):
    ctx = make_ctx(tmp_path)
    reply = run(ctx, "manage_sheet", action="create", sheet_name="Summary", index=0)
    assert [s["name"] for s in reply["sheets"]] == ["Summary", "Sheet1", "My Notes"]
    run(ctx, "manage_sheet", action="move", sheet_name="Summary", index=2)
    assert ctx.book.wb.sheetnames == ["Sheet1", "My Notes", "Summary"]
    assert refused(ctx, "manage_sheet", action="move", sheet_name="Summary")
    run(ctx, "manage_sheet", action="hide", sheet_name="Sheet1")
    run(ctx, "manage_sheet", action="hide", sheet_name="Summary")
    last = refused(ctx, "manage_sheet", action="hide", sheet_name="My Notes")
    assert "last visible sheet" in last["message"]
    assert refused(ctx, "manage_sheet", action="delete", sheet_name="My Notes")
    run(ctx, "manage_sheet", action="unhide", sheet_name="Sheet1")
    assert ctx.book.wb["Sheet1"].sheet_state == "visible"
    copy = run(ctx, "manage_sheet", action="copy", sheet_name="Sheet1", new_name="Copy", index=0)
    assert copy["sheets"][0]["name"] == "Copy" and value(ctx, "A2", "Copy") == "North"


def test_find_cells_matches_csv(tmp_path):
    ctx = make_ctx(tmp_path)
    first = run(ctx, "find_cells", query="north")
    assert first["matches_csv"] == "address\nSheet1!A2" and first["total_matches"] == 2
    every = run(ctx, "find_cells", query="appl", match="prefix", include_values=True,
                **{"return": "all"})  # fmt: skip
    assert (
        every["matches_csv"] == "address,value\n'My Notes'!A1,apple pie\n'My Notes'!B2,Apple juice"
    )
    exact = run(ctx, "find_cells", query="Apple", match="equals", case_sensitive=True)
    assert exact["total_matches"] == 0
    assert refused(ctx, "find_cells", query="(a|b)", match="regex")["error"] == "unsupported_regex"


def test_recalculate_and_read_small_ranges_as_a_matrix(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.book.wb["Sheet1"]["D2"] = "=B2*C2"
    ctx.book.touch()
    reply = run(ctx, "recalculate_and_read", cell_ranges=["B2:D2"])
    assert reply["ranges"] == [{"range": "Sheet1!B2:D2", "values": [[10, 2.5, 25]]}]


def test_path_is_confined_to_the_episode_workbook(tmp_path):
    ctx = make_ctx(tmp_path)
    for path in ("data.xlsx", "data/data.xlsx", "", None):
        assert run(ctx, "list_sheets", path=path)["sheet_count"] == 2
    outside = tmp_path / "secret.xlsx"
    sales_book(outside)
    os.symlink(outside, ctx.folder / "link.xlsx")
    (ctx.folder / "other.xlsx").write_bytes(outside.read_bytes())
    cases = {
        "/etc/passwd.xlsx": "invalid_path",
        "../secret.xlsx": "invalid_path",
        "data/../../secret.xlsx": "invalid_path",
        "a\0.xlsx": "invalid_path",
        "notes.txt": "invalid_path",
        "link.xlsx": "file_not_found",
        "missing.xlsx": "file_not_found",
        "other.xlsx": "unsupported_path",
    }
    for path, code in cases.items():
        assert refused(ctx, "write_range", path=path, range="A1", data=1)["error"] == code, path
    assert value(ctx, "A1") == "Region"  # nothing was written through a refused path


def test_code_interpreter_sees_the_workbook_at_data_data_xlsx(tmp_path):
    ctx = make_ctx(tmp_path, EnvConfig(sandbox_mode="rlimit"))
    code = (
        "import openpyxl\n"
        "wb = openpyxl.load_workbook('data/data.xlsx')\n"
        "print(wb['Sheet1']['A2'].value)\n"
        "wb['Sheet1']['E1'] = 'from code'\n"
        "wb.save('data/data.xlsx')\n"
    )
    out = SRL_TOOLS["code_interpreter"].call(ctx, {"code": code})
    assert out == "Code executed successfully:\nNorth\n"
    assert value(ctx, "E1") == "from code"  # the working copy holds the code's edits
    failed = SRL_TOOLS["code_interpreter"].call(ctx, {"code": "print('x')\nraise SystemExit(3)"})
    assert failed.startswith("Code execution failed with status: runtime_error (exit_code=3)\nx")


def test_an_episode_with_the_preset_answers_in_json(tmp_path):
    env = SpreadsheetEnv(EnvConfig(tools="spreadsheet-rl"), workdir_root=tmp_path / "work")
    obs = env.reset(make_task(tmp_path, lambda ws: None))
    assert [s["function"]["name"] for s in obs.tool_schemas] == [f["name"] for f in FACTS]
    assert obs.info["parallel_safe_tools"] == ["inspect_range", "list_sheets", "find_cells"]
    step = env.step(ToolCall("write_range", {"range": "A1", "data": "=1"}))
    assert not step.ok and json.loads(step.observation)["error"] == "formula_rejected"
    step = env.step(ToolCall("write_range", {"range": "A1", "values": 1}))
    assert not step.ok and json.loads(step.observation)["error"] == "invalid_arguments"
    step = env.step(ToolCall("list_sheets", {}))
    assert step.ok and json.loads(step.observation)["status"] == "success"
    env.close()


def test_upstream_descriptions_can_replace_ours_from_a_users_copy(tmp_path):
    import yaml

    mine = {name: srl.SCHEMAS[name] for name in ("write_range", "list_sheets")}
    entries = []
    for name, schema in mine.items():
        theirs = json.loads(json.dumps(schema))
        theirs["function"]["description"] = f"their words for {name}"
        for key, prop in theirs["function"]["parameters"]["properties"].items():
            prop["description"] = f"their words for {key}"
        entries.append({"class_name": f"x.{name}", "config": {}, "tool_schema": theirs})
    copy_of_yaml = tmp_path / "spreadsheet_tools.yaml"
    copy_of_yaml.write_text(yaml.safe_dump({"tools": entries}, sort_keys=False))
    cfg = EnvConfig(tools="spreadsheet-rl", tool_descriptions=str(copy_of_yaml))
    env = SpreadsheetEnv(cfg, workdir_root=tmp_path / "work")
    by_name = {s["function"]["name"]: s["function"] for s in env.schemas}
    assert by_name["write_range"]["description"] == "their words for write_range"
    assert by_name["write_range"]["parameters"]["properties"]["data"]["description"] == (
        "their words for data"
    )
    assert by_name["inspect_range"] == srl.SCHEMAS["inspect_range"]["function"]  # not in the copy
    entries[0]["tool_schema"]["function"]["parameters"]["required"] = ["range"]
    copy_of_yaml.write_text(yaml.safe_dump({"tools": entries}, sort_keys=False))
    with pytest.raises(ConfigError, match="arguments of write_range differ"):
        SpreadsheetEnv(cfg, workdir_root=tmp_path / "work")
    with pytest.raises(ConfigError, match="spreadsheet-rl tools only"):
        EnvConfig(tools="full", tool_descriptions=str(copy_of_yaml))

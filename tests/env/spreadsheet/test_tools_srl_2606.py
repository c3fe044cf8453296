"""The spreadsheet-rl-2606 preset: upstream's June 2026 scaffold beside the checkpoint's preset.

Facts from GitHub Spreadsheet-RL/Spreadsheet-RL: copy_range's arguments from
configs/tool/spreadsheet_tools.yaml at 5335ee0b; sheet resolution from
verl/verl/tools/worksheet_resolution.py; the template checks from
verl/verl/tools/formula_fill_core.py; find_cells' sheet_scope/searched_sheets
from verl/verl/tools/find_cells.py. copy_range's own contract is tested in
tests/env/spreadsheet/test_tools_copy.py.
"""

from __future__ import annotations

import json
from typing import Any

import openpyxl
import pytest

from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.tools import SRL_2606_TOOLS, SRL_TOOLS, ToolError, resolve_tools
from spreadrl.env.spreadsheet.tools.srl.formulas import check_syntax, normalized
from spreadrl.errors import SpreadrlError
from tests.env.spreadsheet.gym_helpers import make_ctx

# upstream's yaml (5335ee0b), copy_range: (name, type) in order, and required
COPY_RANGE_FACTS = (
    [
        ("path", "string"),
        ("sheet_name", "string"),
        ("source_sheet_name", "string"),
        ("destination_sheet_name", "string"),
        ("source_range", "string"),
        ("destination_range", "string"),
    ],
    ["source_range", "destination_range"],
)


def run(ctx: Any, name: str, tools: dict = SRL_2606_TOOLS, **arguments: Any) -> dict[str, Any]:
    return json.loads(tools[name].call(ctx, arguments))


def refused(ctx: Any, name: str, tools: dict = SRL_2606_TOOLS, **arguments: Any) -> dict:
    with pytest.raises(ToolError) as info:
        tools[name].call(ctx, arguments)
    return json.loads(info.value.observation)


def test_the_twelve_stay_the_checkpoints_and_copy_range_joins():
    names = [t.name for t in resolve_tools("spreadsheet-rl-2606")]
    assert names == [*list(SRL_TOOLS)[:5], "copy_range", *list(SRL_TOOLS)[5:]]
    for name, tool in SRL_TOOLS.items():
        assert SRL_2606_TOOLS[name].schema() == tool.schema()
        assert SRL_2606_TOOLS[name].parallel_safe is tool.parallel_safe
    params = SRL_2606_TOOLS["copy_range"].schema()["function"]["parameters"]
    facts = [(k, v["type"]) for k, v in params["properties"].items()]
    assert (facts, params["required"]) == COPY_RANGE_FACTS
    assert SRL_2606_TOOLS["copy_range"].parallel_safe is False


def test_the_preset_stands_alone():
    assert EnvConfig(tools=["spreadsheet-rl-2606"]).tools == "spreadsheet-rl-2606"
    with pytest.raises(SpreadrlError, match="use it alone"):
        resolve_tools(["spreadsheet-rl-2606", "copy_range"])
    with pytest.raises(SpreadrlError, match="use it alone"):
        resolve_tools(["spreadsheet-rl-2606", "spreadsheet-rl"])


def test_quoted_and_differently_cased_sheet_names_resolve(tmp_path):
    ctx = make_ctx(tmp_path)
    reply = run(ctx, "inspect_range", range="A1", sheet_name="'my notes'")
    assert reply["ranges"][0]["range"] == "'My Notes'!A1"
    found = run(ctx, "find_cells", query="juice", range="'MY NOTES'!A1:C3")
    assert found["total_matches"] == 1
    # the checkpoint's preset keeps its own rules: a quoted name is not a sheet there
    assert refused(ctx, "inspect_range", SRL_TOOLS, range="A1", sheet_name="'my notes'")


def test_ambiguous_and_missing_sheets_say_which_sheets_exist(tmp_path):
    wb = openpyxl.Workbook()
    wb.active.title = "Data"
    wb.create_sheet("Data ")  # Excel's names are unique ignoring case, not spaces
    for n in range(12):
        wb.create_sheet(f"S{n}")
    wb.save(tmp_path / "many.xlsx")
    ctx = make_ctx(tmp_path, book=tmp_path / "many.xlsx")
    assert run(ctx, "inspect_range", range="DATA!A1")["ranges"][0]["range"] == "Data!A1"
    ambiguous = refused(ctx, "inspect_range", range="A1", sheet_name=" data ")
    assert ambiguous["error"] == "ambiguous_sheet_name"
    assert "'Data', 'Data '" in ambiguous["message"]
    missing = refused(ctx, "clear_range", range="Nope!A1")
    assert missing["error"] == "sheet_not_found" and missing["message"].endswith("(+4 more)")
    # write_range creates a sheet it does not find, as upstream's does
    assert run(ctx, "write_range", range="Fresh!A1", data=1)["created_sheet"] is True


def test_fill_formula_normalizes_then_checks_its_template(tmp_path):
    ctx = make_ctx(tmp_path)
    reply = run(ctx, "fill_formula", start_cell="D2", end_row=3, formula_template="B2*C2")
    assert reply["filled_cells"] == 2 and ctx.book.wb["Sheet1"]["D3"].value == "=B3*C3"
    run(ctx, "fill_formula", start_cell="E2", formula_template="=IF(A2='North',1,0)")
    assert ctx.book.wb["Sheet1"]["E2"].value == '=IF(A2="North",1,0)'
    version = ctx.book.version
    unclosed = refused(ctx, "fill_formula", start_cell="F2", formula_template="=SUM(B2:B6")
    assert (
        unclosed["error"] == "invalid_formula"
        and "position 5: unclosed '('" in (unclosed["message"])
    )
    arity = refused(ctx, "fill_formula", start_cell="F2", formula_template="=COUNTIF(A:A,1,2)")
    assert "COUNTIF takes 2 arguments" in arity["message"]
    assert ctx.book.version == version and ctx.book.wb["Sheet1"]["F2"].value is None
    # the checkpoint's preset refuses a template without its =
    assert refused(ctx, "fill_formula", SRL_TOOLS, start_cell="F2", formula_template="B2")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("=A1&'x'", '=A1&"x"'),
        ("='My Notes'!A1&'it''s'", "='My Notes'!A1&\"it's\""),
        ("=A1&\"'keep'\"", "=A1&\"'keep'\""),
        ("SUM(A1:A3)", "=SUM(A1:A3)"),
    ],
)
def test_single_quoted_text_becomes_a_string_but_sheet_names_stay(template, expected):
    assert normalized(template) == expected


@pytest.mark.parametrize(
    ("formula", "message"),
    [
        ("=SUMIFS(A:A,B:B)", "SUMIFS takes 3-255, an odd number"),
        ("=COUNTIFS(A:A,1,B:B)", "COUNTIFS takes 2-254, an even number"),
        ("=(A1+2))", "position 8: unexpected ')'"),
        ('=A1&"open', "unclosed double quote"),
        ("={1,2)", "expected '}' to close '{'"),
    ],
)
def test_the_syntax_checks_name_what_is_wrong(formula, message):
    with pytest.raises(ToolError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_syntax(formula)


def test_sound_formulas_pass_the_checks():
    for formula in ('=SUMIF(A:A,"x",B:B)', "=COUNTIFS(A:A,1,B:B,2)", '=IF(A1="(",1,2)'):
        check_syntax(formula)


def test_find_cells_says_which_sheets_it_searched(tmp_path):
    ctx = make_ctx(tmp_path)
    everywhere = run(ctx, "find_cells", query="apple")
    assert everywhere["sheet_scope"] == "all"
    assert everywhere["searched_sheets"] == ["Sheet1", "My Notes"]
    one = run(ctx, "find_cells", query="North", sheet_name="sheet1")
    assert one["sheet_scope"] == "Sheet1" and one["searched_sheets"] == ["Sheet1"]
    assert "sheet_scope" not in run(ctx, "find_cells", SRL_TOOLS, query="apple")


def test_an_episode_with_the_2606_preset_copies_and_scores(tmp_path):
    from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
    from spreadrl.env.types import ToolCall
    from tests.env.spreadsheet.gym_helpers import make_task

    def answer(ws):
        for r in range(2, 7):
            ws[f"D{r}"] = f"=B{r}*C{r}"

    env = SpreadsheetEnv(EnvConfig(tools="spreadsheet-rl-2606"), workdir_root=tmp_path / "work")
    obs = env.reset(make_task(tmp_path, answer))
    assert "copy_range" in [s["function"]["name"] for s in obs.tool_schemas]
    step = env.step(
        ToolCall("fill_formula", {"start_cell": "sheet1!D2", "formula_template": "B2*C2"})
    )
    assert step.ok, step.observation
    step = env.step(ToolCall("copy_range", {"source_range": "D2", "destination_range": "D3:D6"}))
    assert step.ok and json.loads(step.observation)["copied_cells"] == 4
    assert env.finish("done").reward == 1.0
    env.close()

"""copy_range against Spreadsheet-RL's contract (verl/verl/tools/copy_range.py, yaml 5335ee0b).

The contract, as facts: one finite source rectangle; a destination that is a
top-left cell, a same-shaped range, or any range for a one-cell source;
relative references move, ``$`` parts stay; text starting with ``=`` stays
text; styles, comments and hyperlinks go with the cells; merged placeholders
are skipped and counted; the source is read before anything is written; a cell
cap refuses oversized copies. Both spreadrl's own tool and the
spreadsheet-rl-2606 preset's go through :mod:`spreadrl.env.spreadsheet.tools.copy`.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import openpyxl
import pytest
from openpyxl.comments import Comment
from openpyxl.styles import Font
from openpyxl.worksheet.formula import ArrayFormula

from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.tools import SRL_2606_TOOLS, TOOLS, ToolError, resolve_tools
from spreadrl.env.spreadsheet.tools.copy import copy_cells, source_range, target_range
from tests.env.spreadsheet.gym_helpers import make_ctx


def book_with_block(path):
    """Sheet1 A1:B3 holds values, formulas, a style, a comment, a link and formula-like text."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws["A1"], ws["B1"] = 1, "=A1*2"
    ws["A2"], ws["B2"] = 2, "=$A$1+A2"
    ws["A3"] = "note"
    ws["B3"] = "=literal"
    ws["B3"].data_type = "s"  # text that only looks like a formula
    ws["A1"].font = Font(bold=True)
    ws["A2"].comment = Comment("check this", "me")
    ws["A3"].hyperlink = "https://example.org/a3"
    ws["F1"] = "keep"
    ws["F1"].comment = Comment("old", "me")
    wb.create_sheet("Other")
    wb.save(path)
    return path


def ctx_of(tmp_path, cap: int | None = None) -> Any:
    config = EnvConfig() if cap is None else EnvConfig(max_write_cells=cap)
    return make_ctx(tmp_path, config, book_with_block(tmp_path / "block.xlsx"))


def cell(ctx, ref, sheet="Sheet1"):
    return ctx.book.wb[sheet][ref]


def test_a_top_left_destination_takes_the_source_shape_and_moves_formulas(tmp_path):
    ctx = ctx_of(tmp_path)
    reply = TOOLS["copy_range"].call(ctx, {"source": "A1:B3", "destination": "D5"})
    assert "Sheet1!A1:B3 to Sheet1!D5:E7: 6 cells" in reply
    assert cell(ctx, "D5").value == 1 and cell(ctx, "E5").value == "=D5*2"
    assert cell(ctx, "E6").value == "=$A$1+D6"  # $ parts stay, relative parts move
    assert cell(ctx, "E7").value == "=literal" and cell(ctx, "E7").data_type == "s"
    assert cell(ctx, "D5").font.b is True
    assert cell(ctx, "D6").comment.text == "check this"
    assert cell(ctx, "D7").hyperlink.target == "https://example.org/a3"
    assert cell(ctx, "D7").hyperlink.ref == "D7"
    assert cell(ctx, "A1").value == 1 and cell(ctx, "B1").value == "=A1*2"  # source untouched


def test_the_destination_sheet_and_a_same_shaped_range(tmp_path):
    ctx = ctx_of(tmp_path)
    TOOLS["copy_range"].call(ctx, {"source": "Sheet1!B1:B2", "destination": "Other!C10:C11"})
    assert cell(ctx, "C10", "Other").value == "=B10*2"
    assert cell(ctx, "C11", "Other").value == "=$A$1+B11"


def test_one_cell_fills_a_larger_range_and_other_shapes_are_refused(tmp_path):
    ctx = ctx_of(tmp_path)
    TOOLS["copy_range"].call(ctx, {"source": "B1", "destination": "H1:I3"})
    assert cell(ctx, "H1").value == "=G1*2" and cell(ctx, "I3").value == "=H3*2"
    for bad in ("H1:H3", "H1:I2"):  # a 2x1 source onto other shapes
        with pytest.raises(ToolError, match="shape"):
            TOOLS["copy_range"].call(ctx, {"source": "A1:A2", "destination": bad})


@pytest.mark.parametrize(
    ("source", "why"),
    [("A:B", "not whole rows or columns"), ("1:2", "not whole rows"), ("A1:B2,C3", "one rect")],
)
def test_the_source_is_one_finite_rectangle(tmp_path, source, why):
    ctx = ctx_of(tmp_path)
    with pytest.raises(ToolError, match=why.split()[0]):
        TOOLS["copy_range"].call(ctx, {"source": source, "destination": "H1"})


def test_a_copy_past_the_sheet_edge_is_refused_and_writes_nothing(tmp_path):
    ctx = ctx_of(tmp_path)
    version = ctx.book.version
    with pytest.raises(ToolError, match="past the sheet"):
        TOOLS["copy_range"].call(ctx, {"source": "A1:B3", "destination": "XFD1"})
    assert ctx.book.version == version


def test_the_cap_counts_source_and_destination_cells(tmp_path):
    ctx = ctx_of(tmp_path, cap=4)
    with pytest.raises(ToolError, match="over the 4-cell limit"):
        TOOLS["copy_range"].call(ctx, {"source": "A1:B3", "destination": "H1"})
    with pytest.raises(ToolError, match="destination .* over the 4-cell limit"):
        TOOLS["copy_range"].call(ctx, {"source": "A1", "destination": "H1:H5"})
    assert cell(ctx, "H1").value is None


def test_an_overlapping_copy_reads_the_cells_as_they_were(tmp_path):
    ctx = ctx_of(tmp_path)
    book = ctx.book
    source = source_range(book, "A1:A3")
    copy_cells(book, source, target_range(book, "A2", source), cap=0)
    assert [cell(ctx, f"A{r}").value for r in (1, 2, 3, 4)] == [1, 1, 2, "note"]


def test_an_empty_source_cell_clears_what_the_destination_held(tmp_path):
    ctx = ctx_of(tmp_path)
    TOOLS["copy_range"].call(ctx, {"source": "C1", "destination": "F1"})
    assert cell(ctx, "F1").value is None and cell(ctx, "F1").comment is None


def test_merged_placeholders_are_skipped_and_counted(tmp_path):
    ctx = ctx_of(tmp_path)
    ctx.book.wb["Sheet1"].merge_cells("H2:H3")
    reply = TOOLS["copy_range"].call(ctx, {"source": "A1:A3", "destination": "H1"})
    assert "2 cells" in reply and "skipped 1 merged" in reply
    assert cell(ctx, "H2").value == 2 and cell(ctx, "H1").value == 1


def test_an_array_formula_moves_with_its_area(tmp_path):
    ctx = ctx_of(tmp_path)
    ctx.book.wb["Sheet1"]["C1"] = ArrayFormula("C1:C2", "=A1:A2*2")
    TOOLS["copy_range"].call(ctx, {"source": "C1", "destination": "K4"})
    moved = cell(ctx, "K4").value
    assert isinstance(moved, ArrayFormula) and moved.ref == "K4:K5" and moved.text == "=I4:I5*2"


def test_the_saved_copy_reopens_with_its_formulas(tmp_path):
    ctx = ctx_of(tmp_path)
    TOOLS["copy_range"].call(ctx, {"source": "A1:B2", "destination": "Other!A1"})
    saved = openpyxl.load_workbook(ctx.book.save())
    assert saved["Other"]["B2"].value == "=$A$1+A2"


def test_copy_range_is_named_not_in_full(tmp_path):
    assert "copy_range" not in [t.name for t in resolve_tools("full")]
    assert "copy_range" in [t.name for t in resolve_tools("full,copy_range")]


# ---- the spreadsheet-rl-2606 preset's copy_range: upstream's reply shape ------------------------
def run(ctx, **arguments) -> dict[str, Any]:
    return json.loads(SRL_2606_TOOLS["copy_range"].call(ctx, arguments))


def refused(ctx, **arguments) -> dict[str, Any]:
    with pytest.raises(ToolError) as info:
        SRL_2606_TOOLS["copy_range"].call(ctx, arguments)
    return json.loads(info.value.observation)


def test_the_2606_reply_names_both_ranges_and_samples_the_destination(tmp_path):
    ctx = ctx_of(tmp_path)
    reply = run(ctx, source_range="A1:B2", destination_range="Other!D4")
    assert reply["status"] == "success" and reply["file"] == "data.xlsx"
    assert reply["source_range"] == "Sheet1!A1:B2"
    assert reply["destination_range"] == "Other!D4:E5" and reply["copied_cells"] == 4
    rows = list(csv.reader(io.StringIO(reply["sample_csv"])))
    assert rows[0] == ["address", "value", "formula"]
    assert ["Other!E4", "", "=D4*2"] in rows and ["Other!D4", "1", ""] in rows


def test_the_2606_sheet_arguments_pick_the_sheets(tmp_path):
    ctx = ctx_of(tmp_path)
    run(ctx, source_range="B1", destination_range="B5:B6", destination_sheet_name="Other")
    assert cell(ctx, "B6", "Other").value == "=A6*2"  # the source stays on the first sheet
    run(ctx, sheet_name="Other", source_range="A1", destination_range="C1")
    assert cell(ctx, "C1", "Other").value == cell(ctx, "A1", "Other").value
    mismatch = refused(ctx, source_range="Sheet1!A1", source_sheet_name="Other",
                       destination_range="H1")  # fmt: skip
    assert mismatch["error"] == "copy_failed" and "mismatch" in mismatch["message"]


def test_the_2606_errors_carry_upstreams_codes(tmp_path):
    ctx = ctx_of(tmp_path)
    assert refused(ctx, source_range=" ", destination_range="A1")["error"] == "invalid_source_range"
    assert refused(ctx, source_range="A1", destination_range="")["error"] == (
        "invalid_destination_range"
    )
    shape = refused(ctx, source_range="A1:A2", destination_range="H1:H3")
    assert shape["error"] == "copy_failed" and shape["message"].startswith("failed to copy range")


def test_the_2606_reply_is_partial_when_merged_cells_were_skipped(tmp_path):
    ctx = ctx_of(tmp_path)
    ctx.book.wb["Sheet1"].merge_cells("H2:H3")
    reply = run(ctx, source_range="A1:A3", destination_range="H1")
    assert reply["status"] == "partial_success" and reply["skipped_merged_cells"] == 1

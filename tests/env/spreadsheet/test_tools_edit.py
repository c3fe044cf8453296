"""write_range, format_range, fill_formula and clear_range: broadcasting, null vs "", caps."""

from __future__ import annotations

import openpyxl

from spreadrl.env.config import EnvConfig
from tests.env.spreadsheet.gym_helpers import call, error_of, make_ctx, value


def test_write_scalar_broadcasts_over_range(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "write_range", range="E1:F3", values=0)
    assert text == "wrote Sheet1!E1:F3: 6 values, 0 formulas, 0 cleared, 0 left as they were"
    assert [value(ctx, c) for c in ("E1", "F1", "E3", "F3")] == [0, 0, 0, 0]


def test_write_row_broadcasts_down_and_single_value_rows_across(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "write_range", range="E1:F3", values=["x", "=B1"])
    assert [value(ctx, "E3"), value(ctx, "F3")] == ["x", "=B1"]
    call(ctx, "write_range", range="G1:H2", values=[[1], [2]])
    assert [value(ctx, "G1"), value(ctx, "H1"), value(ctx, "G2"), value(ctx, "H2")] == [1, 1, 2, 2]


def test_write_matrix_and_single_cell_anchor_grows(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "write_range", range="Sheet1!E2", values=[[1, 2], [3, "=E2+F2"]])
    assert text.startswith("wrote Sheet1!E2:F3: 3 values, 1 formulas")
    assert value(ctx, "F3") == "=E2+F2"


def test_null_leaves_and_empty_string_clears(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.book.wb["Sheet1"]["B2"].number_format = "yyyy-mm-dd"
    text = call(ctx, "write_range", range="A2:C2", values=[None, "", "new"])
    assert "1 values, 0 formulas, 1 cleared, 1 left as they were" in text
    assert value(ctx, "A2") == "North"
    assert value(ctx, "B2") is None
    assert ctx.book.wb["Sheet1"]["B2"].number_format == "General"
    assert value(ctx, "C2") == "new"


def test_write_shape_mismatches_and_bad_values(tmp_path):
    ctx = make_ctx(tmp_path)
    assert "values has 3 rows but Sheet1!A1:B2 has 2" in error_of(
        ctx, "write_range", range="A1:B2", values=[[1, 2], [3, 4], [5, 6]]
    )
    assert "row 1 of values has 3 values but Sheet1!A1:B2 has 2 columns" in error_of(
        ctx, "write_range", range="A1:B2", values=[1, 2, 3]
    )
    assert "mixes rows" in error_of(ctx, "write_range", range="A1:B2", values=[[1], 2])
    assert "empty list" in error_of(ctx, "write_range", range="A1", values=[])
    assert "is a dict" in error_of(ctx, "write_range", range="A1", values={"a": 1})
    assert "missing required argument 'values'" in error_of(ctx, "write_range", range="A1")
    assert "'range'" in error_of(ctx, "write_range", range=3, values=1)
    assert "does not exist" in error_of(ctx, "write_range", range="Nope!A1", values=1)
    assert value(ctx, "A1") == "Region"  # nothing was half-written


def test_write_cell_cap_and_merged_cells(tmp_path):
    ctx = make_ctx(tmp_path, EnvConfig(max_write_cells=10))
    assert "over the 10-cell limit of write_range" in error_of(
        ctx, "write_range", range="A1:B6", values=1
    )
    ctx.book.wb["Sheet1"].merge_cells("E1:F1")
    assert "merged range" in error_of(ctx, "write_range", range="E1:F1", values=[1, 2])
    assert call(ctx, "write_range", range="E1:F1", values=[1, None]).startswith("wrote")


def test_fill_formula_translates_relative_references(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "write_range", range="D2", values="=B2*C2+$B$2+B$2+$C2")
    text = call(ctx, "fill_formula", source="D2", target="D3:D6")
    assert "last cell: =B6*C6+$B$2+B$2+$C6" in text
    assert value(ctx, "D4") == "=B4*C4+$B$2+B$2+$C4"
    call(ctx, "fill_formula", source="D2", target="E2:E3")
    assert value(ctx, "E2") == "=C2*D2+$B$2+C$2+$C2"
    assert value(ctx, "E3") == "=C3*D3+$B$2+C$2+$C3"


def test_fill_formula_errors(tmp_path):
    ctx = make_ctx(tmp_path)
    assert "not a formula" in error_of(ctx, "fill_formula", source="A2", target="A3:A4")
    assert "must be one cell" in error_of(ctx, "fill_formula", source="A2:A3", target="A4")
    assert "missing required argument 'target'" in error_of(ctx, "fill_formula", source="A2")


def test_clear_range_empties_values_and_formats(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.book.wb["Sheet1"]["C3"].number_format = "0.00"
    assert (
        call(ctx, "clear_range", range="B2:C3") == "cleared Sheet1!B2:C3: 4 non-empty cells emptied"
    )
    assert value(ctx, "B2") is None and value(ctx, "C3") is None and value(ctx, "A2") == "North"
    assert ctx.book.wb["Sheet1"]["C3"].number_format == "General"
    assert "cleared Sheet1!A1:C6: 14" in call(ctx, "clear_range", range="A:C")


def test_format_range(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(
        ctx, "format_range", range="A1:C1", bold=True, fill_color="#ffff00", font_color="FF0000",
        horizontal_alignment="center", number_format="0.0%", column_width=14,
    )  # fmt: skip
    assert text.startswith("formatted Sheet1!A1:C1 (3 cells): number_format='0.0%'")
    cell = ctx.book.wb["Sheet1"]["B1"]
    assert cell.font.bold and cell.font.color.rgb == "FFFF0000"
    assert cell.fill.start_color.rgb == "FFFFFF00" and cell.alignment.horizontal == "center"
    assert cell.number_format == "0.0%" and ctx.book.wb["Sheet1"].column_dimensions["C"].width == 14
    assert "nothing to format" in error_of(ctx, "format_range", range="A1")
    assert "not a hex colour" in error_of(ctx, "format_range", range="A1", fill_color="yellow")
    assert "bad arguments" in error_of(ctx, "format_range", range="A1", horizontal_alignment="mid")


def test_edits_survive_save_and_reload(tmp_path):
    ctx = make_ctx(tmp_path)
    call(ctx, "write_range", range="D1:D2", values=[["Total"], ["=B2*C2"]])
    path = ctx.book.save()
    ws = openpyxl.load_workbook(path)["Sheet1"]
    assert ws["D1"].value == "Total" and ws["D2"].value == "=B2*C2"


def test_a_row_zero_is_a_tool_error_not_a_crash(tmp_path):
    """B0 matches the A1 pattern but openpyxl has no row 0: the model gets an error reply
    (it raised openpyxl's CellCoordinatesException out of the tool, ending the episode)."""
    ctx = make_ctx(tmp_path)
    for ref in ("B0", "B00", "A0:B2", "A1:B0"):
        assert "lies outside the sheet" in error_of(ctx, "write_range", range=ref, values=1)

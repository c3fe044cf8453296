"""inspect_range, list_sheets and find_cells on a small in-code workbook."""

from __future__ import annotations

import re

import openpyxl

from spreadrl.env.config import EnvConfig
from tests.env.spreadsheet.gym_helpers import call, error_of, make_ctx


def test_inspect_cells_lists_every_nonempty_cell(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "inspect_range", ranges=["A1:C2"])
    assert text.splitlines() == [
        "Sheet1!A1:C2 (2 rows x 3 columns, 6 non-empty cells)",
        'A1: "Region" | B1: "Units" | C1: "Price"',
        'A2: "North" | B2: 10 | C2: 2.5',
    ]


def test_inspect_quoted_sheet_column_range_and_single_string(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "inspect_range", ranges="'My Notes'!A:B")
    assert "'My Notes'!A1:B2" in text and 'A1: "apple pie"' in text and 'B2: "Apple juice"' in text
    # a column-only range is bounded by the used rows, not the sheet's million
    assert "Sheet1!B1:B6 (6 rows x 1 columns" in call(ctx, "inspect_range", ranges=["B:B"])


def test_inspect_pagination_with_cursor(tmp_path):
    ctx = make_ctx(tmp_path)
    first = call(ctx, "inspect_range", ranges=["A1:C6"], max_cells=7)
    assert 'A3: "South"' in first and "B3" not in first
    assert "[page: non-empty cells 1-7 of 18; call again with cursor=7 for the next page]" in first
    cursors = [int(m) for m in re.findall(r"cursor=(\d+)", first)]
    second = call(ctx, "inspect_range", ranges=["A1:C6"], max_cells=7, cursor=cursors[0])
    assert second.splitlines()[1].startswith("B3: 4 | C3: 3") and "cursor=14" in second
    last = call(ctx, "inspect_range", ranges=["A1:C6"], max_cells=7, cursor=14)
    assert "[last page: non-empty cells 15-18 of 18]" in last and "C6: 2" in last
    assert "past the end" in error_of(ctx, "inspect_range", ranges=["A1:C6"], cursor=18)


def test_inspect_caps_and_mistakes(tmp_path):
    ctx = make_ctx(tmp_path, EnvConfig(max_page_cells=50))
    assert "1 to 20 ranges" in error_of(ctx, "inspect_range", ranges=["A1"] * 21)
    assert "between 1 and 50" in error_of(ctx, "inspect_range", ranges=["A1"], max_cells=51)
    bad = error_of(ctx, "inspect_range", ranges=["A1:ZZZZ9"])
    assert "not an A1 range" in bad
    missing = error_of(ctx, "inspect_range", ranges=["Nope!A1"])
    assert "sheet 'Nope' does not exist" in missing and "'My Notes'" in missing
    typed = error_of(ctx, "inspect_range", ranges=["A1"], cursor="first")
    assert (
        typed.startswith("bad arguments for inspect_range: 'cursor'") and "inspect_range(" in typed
    )
    assert "missing required argument 'ranges'" in error_of(ctx, "inspect_range")
    assert "unknown argument 'rnage'" in error_of(ctx, "inspect_range", ranges=["A1"], rnage="x")


def test_inspect_sheet_name_is_case_insensitive_and_empty_area(tmp_path):
    ctx = make_ctx(tmp_path)
    assert 'A1: "apple pie"' in call(ctx, "inspect_range", ranges=["'my notes'!A1"])
    text = call(ctx, "inspect_range", ranges=["Sheet1!H100:J200"])
    assert "(all empty)" in text
    assert ctx.book.wb["Sheet1"].max_row == 6  # reading created no cells


def test_inspect_summary_mode(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "inspect_range", ranges=["A1:C6"], mode="summary")
    lines = text.splitlines()
    assert lines[0] == "Sheet1!A1:C6: 6 rows x 3 columns, 18 non-empty cells (0 formulas)"
    assert lines[1].startswith('  A "Region": 5 text; e.g. "North", "South", "East"')
    assert lines[2].startswith('  B "Units": 5 number; min 1, max 10, sum 25')
    assert "bad arguments" in error_of(ctx, "inspect_range", ranges=["A1"], mode="table")


def test_list_sheets(tmp_path):
    ctx = make_ctx(tmp_path)
    assert call(ctx, "list_sheets").splitlines() == [
        "1. Sheet1: 6 rows x 3 columns (A1:C6)",
        "2. 'My Notes': 2 rows x 2 columns (A1:B2)",
    ]


def test_find_cells_value_regex_case_and_cap(tmp_path):
    ctx = make_ctx(tmp_path)
    text = call(ctx, "find_cells", query="north")
    assert text.splitlines() == [
        "2 matches for 'north' in all sheets:",
        'Sheet1!A2: "North"',
        'Sheet1!A6: "North"',
    ]
    assert call(ctx, "find_cells", query="north", match_case=True).startswith("no cells match")
    assert "'My Notes'!B2" in call(ctx, "find_cells", query="^Apple", regex=True, match_case=True)
    assert "Sheet1" not in call(ctx, "find_cells", query="a", sheet="My Notes")
    capped = call(ctx, "find_cells", query="o", max_results=2)
    assert capped.splitlines()[-1].startswith("[stopped at max_results=2; more matches exist")
    assert len(capped.splitlines()) == 4
    assert "'My Notes'" not in call(ctx, "find_cells", query="^10$", regex=True)
    assert "Sheet1!B2: 10" in call(ctx, "find_cells", query="^10$", regex=True)


def test_find_cells_errors(tmp_path):
    ctx = make_ctx(tmp_path)
    assert "not a valid regular expression" in error_of(ctx, "find_cells", query="(", regex=True)
    assert "between 1 and 500" in error_of(ctx, "find_cells", query="a", max_results=1000)
    assert "does not exist" in error_of(ctx, "find_cells", query="a", sheet="Missing")
    assert "'query'" in error_of(ctx, "find_cells", query=5)


def test_formulas_show_as_written(tmp_path):
    wb = openpyxl.Workbook()
    wb.active["A1"] = 2
    wb.active["A2"] = "=A1*2"
    wb.save(tmp_path / "f.xlsx")
    ctx = make_ctx(tmp_path, book=tmp_path / "f.xlsx")
    assert "A2: =A1*2" in call(ctx, "inspect_range", ranges=["A1:A2"])

"""Blank means blank: a cell with no value is empty whatever its style, in every reading path.

openpyxl saves a blank cell that carries a font, fill or number format as
``<c r="D2" s="1" t="n"/>``; IronCalc used to read that as the number 0, so an output
that left the answer cells blank but formatted passed against an answer of 0.
These tests work on saved files, never on ``values_match`` alone.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import openpyxl
import pytest
from openpyxl.styles import Font, PatternFill

from spreadrl.env.spreadsheet.checker import check_workbook
from spreadrl.env.spreadsheet.recalc.values import load_values
from spreadrl.env.spreadsheet.recalc.xlsx_scan import scan_xlsx, typed_blank_cells
from tests.sysdeps import use_libreoffice

HAVE_LO = use_libreoffice()  # installed, or required (CI): tests/sysdeps.py
ENGINES = ["ironcalc", "hybrid"] + (["libreoffice"] if HAVE_LO else [])
CORPUS = Path(__file__).parents[2] / "fixtures" / "recalc_corpus"


def _formatted_blank_output(path: Path, *, with_formula: bool) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"] = 1
    for row in (2, 3, 4):
        ws[f"D{row}"].font = Font(bold=True)
        ws[f"D{row}"].fill = PatternFill("solid", start_color="FFFF00")
    ws["D5"].number_format = "0.00"
    if with_formula:  # an uncached formula: the workbook goes through the engine
        ws["F1"] = "=ISBLANK(D2)"
        ws["F2"] = "=COUNTA(D2:D5)"
    wb.save(path)
    return path


def _zero_answer(path: Path) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"] = 1
    for row in (2, 3, 4, 5):
        ws[f"D{row}"] = 0
    wb.save(path)
    return path


def test_openpyxl_writes_formatted_blanks_as_typed_valueless_cells(tmp_path: Path) -> None:
    out = _formatted_blank_output(tmp_path / "o.xlsx", with_formula=False)
    xml = zipfile.ZipFile(out).read("xl/worksheets/sheet1.xml")
    assert b'<c r="D2" s="1" t="n"' in xml  # the form IronCalc read as 0
    assert scan_xlsx(out).typed_blanks == {"Sheet": [(2, 4), (3, 4), (4, 4), (5, 4)]}


@pytest.mark.parametrize(
    ("xml", "blank"),
    [
        (b'<c r="D2" s="1" t="n"/>', True),
        (b'<c r="D2" s="1" t="n"></c>', True),
        (b'<c r="D2" s="1" t="b"><v/></c>', True),
        (b'<c r="D2" t="s"><v></v></c>', True),
        (b'<c r="D2" s="1"/>', False),  # untyped: already empty for every reader
        (b'<c r="D2" t="n"><v>0</v></c>', False),
        (b'<c r="D2" t="inlineStr"><is><t>x</t></is></c>', False),
        (b'<c r="D2" t="str"><f>A1</f><v></v></c>', False),
    ],
)
def test_typed_blank_cells_are_the_valueless_typed_ones(xml: bytes, blank: bool) -> None:
    assert typed_blank_cells(b"<row>" + xml + b"</row>") == ([(2, 4)] if blank else [])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("with_formula", [False, True], ids=["cached", "recalculated"])
def test_formatted_blank_output_fails_against_an_answer_of_zero(
    tmp_path: Path, engine: str, with_formula: bool
) -> None:
    output = _formatted_blank_output(tmp_path / "o.xlsx", with_formula=with_formula)
    answer = _zero_answer(tmp_path / "a.xlsx")
    result = check_workbook(output, answer, "Sheet!D2:D5", engine=engine)
    assert not result.passed
    assert [m.cell for m in result.mismatches] == ["D2", "D3", "D4", "D5"]
    assert all(m.reason == "cell is empty" for m in result.mismatches)
    # and a formatted blank still equals an empty answer cell
    empty = openpyxl.Workbook()
    empty.active["A1"] = 1
    empty.save(tmp_path / "e.xlsx")
    assert check_workbook(output, tmp_path / "e.xlsx", "Sheet!D2:D5", engine=engine).passed


@pytest.mark.parametrize("engine", ENGINES)
def test_formulas_see_a_formatted_blank_as_blank(tmp_path: Path, engine: str) -> None:
    output = _formatted_blank_output(tmp_path / "o.xlsx", with_formula=True)
    book = load_values(output, engine=engine)
    assert book.recalculated
    assert book.value("Sheet", 1, 6) is True  # ISBLANK(D2)
    assert book.value("Sheet", 2, 6) == 0  # COUNTA(D2:D5)


EXCEL_SAVED = sorted(p for p in CORPUS.glob("*.xlsx") if p.name != "SQRT.xlsx")


def _whole_sheets(path: Path) -> str:
    wb = openpyxl.load_workbook(path)
    parts = []
    for ws in wb.worksheets:
        if ws.max_row and ws.max_column:
            parts.append(f"'{ws.title}'!A1:{ws.cell(ws.max_row, ws.max_column).coordinate}")
    return ",".join(parts)


# reveng1.xlsx defines whole-row print areas openpyxl cannot represent; it warns and
# drops them, which changes no cell
@pytest.mark.filterwarnings("ignore:Print area cannot be set:UserWarning")
@pytest.mark.parametrize("fixture", EXCEL_SAVED, ids=lambda p: p.name)
def test_excel_saved_fixture_resaved_by_openpyxl_matches_itself(
    tmp_path: Path, fixture: Path
) -> None:
    """Opened and saved unchanged by openpyxl (cached values dropped, blank cells written
    typed), every Excel-saved fixture still passes against itself on all its cells."""
    resaved = tmp_path / fixture.name
    openpyxl.load_workbook(fixture).save(resaved)
    position = _whole_sheets(fixture)
    result = check_workbook(resaved, fixture, position, engine="hybrid")
    assert result.checked_cells > 0
    # the blank-cell class: an empty answer cell read back as 0, FALSE or 00:00
    assert not [m for m in result.mismatches if m.expected in (None, "")], result.mismatches[:5]
    if HAVE_LO:  # the cells IronCalc alone misses here (TEXT, YEARFRAC basis) need LibreOffice
        assert result.passed, result.mismatches[:5]

"""Excel's reading of formulas where IronCalc differs (spreadrl.env.spreadsheet.recalc.excel_rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openpyxl
import pytest

from spreadrl.env.spreadsheet.recalc.excel_rules import (
    UNKNOWN,
    decode_escapes,
    function_calls,
    mask_strings,
    rewrite_calls,
    rewrite_formula,
    rewrite_intersections,
)
from spreadrl.env.spreadsheet.recalc.values import load_values


@pytest.mark.parametrize(
    ("formula", "decoded"),
    [
        ('="_x005F_x000F_"', '="_x000F_"'),  # an escaped underscore, then plain text
        ('="a_x000F_b"', '="a\x0fb"'),
        ('="say _x0022_hi_x0022_"', '="say ""hi"""'),  # a decoded quote stays a literal
        ('=A1&"_x00"', '=A1&"_x00"'),  # not an escape
        ("=_x0041_1", "=_x0041_1"),  # outside a string literal: left alone
    ],
)
def test_decode_escapes(formula: str, decoded: str) -> None:
    assert decode_escapes(formula) == decoded


@pytest.mark.parametrize(
    ("formula", "rewritten"),
    [
        ("=SUM(E23:F23 G23:H23)", "=SUM(#NULL!)"),
        ("=SUM(A1:C3 B2:D4)", "=SUM(B2:C3)"),
        ("=A:A 3:3", "=A3"),
        ("=SUM($B$1:$B$9 A5:C5)*2", "=SUM(B5)*2"),
        ("=Data!A1:B4 Data!B2:C9", "=Data!B2:B4"),
        ("=SUM(A1:C3 B2:D4 C3:C9)", "=SUM(C3)"),
        ("=SUM(A1:A2 C1:C2 A1:C1)", "=SUM(#NULL!)"),
        ("=SUM(Data!A1:B2 Other!A1:B2)", "=SUM(Data!A1:B2 Other!A1:B2)"),  # two sheets
        ('="A1:B2 B2:C3"', '="A1:B2 B2:C3"'),  # text
        ("=A1 + B1", "=A1 + B1"),
        ("=SUM(A1, B1)", "=SUM(A1, B1)"),
    ],
)
def test_rewrite_intersections(formula: str, rewritten: str) -> None:
    assert rewrite_intersections(formula, "Data") == rewritten


def _cells(values: dict[str, Any]):
    def value_of(sheet: str | None, ref: str) -> Any:
        return values.get(ref if sheet is None else f"{sheet}!{ref}")

    return value_of


@pytest.mark.parametrize(
    ("formula", "values", "rewritten"),
    [
        ('=DEC2BIN("E",0)', {}, "=#NUM!"),
        ("=DEC2HEX(A1,B1)", {"A1": "E", "B1": 11.0}, "=#NUM!"),
        ('=DEC2OCT(A1,B1)&"x"', {"A1": 7.0, "B1": -1.0}, '=#NUM!&"x"'),
        ("=DEC2BIN(A1,B1)", {"A1": "E", "B1": 1.0}, "=DEC2BIN(A1,B1)"),  # Excel: #VALUE!
        ("=DEC2BIN(A1,B1)", {"A1": "#DIV/0!", "B1": 0.0}, "=DEC2BIN(A1,B1)"),
        ("=DEC2BIN(A1*2,0)", {}, "=DEC2BIN(A1*2,0)"),  # an expression: not decided here
        ('=HEX2DEC("-A")', {}, "=#NUM!"),
        ("=HEX2DEC(A1)", {"A1": "FF"}, "=HEX2DEC(A1)"),
        ("=HEX2DEC(A1)", {"A1": 255.0}, "=HEX2DEC(A1)"),
        ("=BIN2DEC(S!A1)", {"S!A1": "102"}, "=#NUM!"),
        ("=OCT2HEX(A1,4)", {"A1": "12345670123"}, "=#NUM!"),  # 11 digits
        ('=YEAR("7/5/1800")', {}, '=YEAR(DATEVALUE("7/5/1800"))'),
        ("=MONTH(C3)+1", {"C3": "7/5/10000"}, "=MONTH(DATEVALUE(C3))+1"),
        ("=YEAR(C3)", {"C3": "-5"}, "=YEAR(C3)"),  # numeric text: Excel's #NUM!
        ("=YEAR(C3)", {"C3": "12:30"}, "=YEAR(C3)"),  # a time
        ("=YEAR(C3)", {"C3": 39575.0}, "=YEAR(C3)"),
        ("=YEAR(C3+1)", {"C3": "7/5/1800"}, "=YEAR(C3+1)"),
        ('=TODAY()&DAY("x")', {}, '=TODAY()&DAY(DATEVALUE("x"))'),
    ],
)
def test_rewrite_calls(formula: str, values: dict[str, Any], rewritten: str) -> None:
    assert rewrite_calls(formula, _cells(values)) == rewritten


def test_function_calls_reads_nesting_strings_and_arrays() -> None:
    formula = '=IF(A1,_xlfn.TEXT(B1,"0,0(x"),SUM({1,2;3,4},MAX()))&LEN(C1'
    code = mask_strings(formula)
    calls = [
        (name, formula[start:end], [formula[a:b] for a, b in spans])
        for name, start, end, spans in function_calls(code)
    ]
    assert calls == [
        ("IF", formula[1:-7], ["A1", '_xlfn.TEXT(B1,"0,0(x")', "SUM({1,2;3,4},MAX())"]),
        ("TEXT", '_xlfn.TEXT(B1,"0,0(x")', ["B1", '"0,0(x"']),
        ("SUM", "SUM({1,2;3,4},MAX())", ["{1,2;3,4}", "MAX()"]),
        ("MAX", "MAX()", []),
    ]  # LEN( is never closed: not listed


def test_function_calls_of_a_deeply_nested_formula() -> None:
    """One pass with a stack: 1,300 nested calls (8,000 characters, hostile input) are read
    whole; a rescan per call was quadratic."""
    formula = "=" + "YEAR(" * 1300 + "A1" + ")" * 1300
    calls = function_calls(mask_strings(formula))
    assert len(calls) == 1300 and calls[0][1:3] == (1, len(formula))
    assert calls[-1][3] == [(1 + 5 * 1300, 3 + 5 * 1300)]


def test_rewrite_formula_returns_the_same_object_when_nothing_applies() -> None:
    formula = "=SUM(A1:A3)*2"
    assert rewrite_formula(formula, lambda s, r: UNKNOWN) is formula


def _workbook(path: Path) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "S"
    ws["A1"], ws["B1"], ws["C1"], ws["D1"] = 1, 2, 3, 4
    ws["A2"], ws["B2"] = "E", 0
    ws["A3"] = "7/5/1800"
    ws["A4"] = "-A"
    ws["E1"] = "=SUM(A1:B1 C1:D1)"
    ws["E2"] = '=IFERROR(SUM(A1:B1 C1:D1),"no intersection")'
    ws["E3"] = "=SUM(A1:C1 B1:D1)"
    ws["E4"] = "=DEC2BIN(A2,B2)"
    ws["E5"] = "=YEAR(A3)"
    ws["E6"] = '="_x005F_x000F_"&"!"'
    ws["E7"] = "=HEX2DEC(A4)"
    ws["E8"] = "=E3*10"  # depends on a rewritten cell
    wb.save(path)
    return path


EXCEL = {  # what Excel computes for _workbook's formulas
    "E1": "#NULL!",
    "E2": "no intersection",
    "E3": 5,
    "E4": "#NUM!",
    "E5": "#VALUE!",
    "E6": "_x000F_!",
    "E7": "#NUM!",
    "E8": 50,
}


def test_hybrid_computes_what_excel_computes_and_says_so(tmp_path: Path) -> None:
    path = _workbook(tmp_path / "w.xlsx")
    ironcalc = load_values(path, engine="ironcalc", recalc=True)
    hybrid = load_values(path, engine="hybrid", recalc=True)
    got = {ref: hybrid.value("S", int(ref[1:]), 5) for ref in EXCEL}
    assert got == EXCEL
    alone = {ref: ironcalc.value("S", int(ref[1:]), 5) for ref in EXCEL}
    assert {ref for ref in EXCEL if alone[ref] != EXCEL[ref]} >= {"E1", "E3", "E4", "E5", "E6"}
    assert hybrid.cell_engine("S", 3, 5) == "ironcalc+excel-rules"
    assert hybrid.formula("S", 3, 5) == "=SUM(A1:C1 B1:D1)"  # the formula as written
    assert hybrid.cell_engine("S", 8, 5) == "ironcalc"

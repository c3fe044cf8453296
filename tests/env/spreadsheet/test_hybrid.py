"""Hybrid recalculation: IronCalc first, LibreOffice for the cells IronCalc is not trusted on.

The LibreOffice tests run the real engine where it is installed (``make sysdeps``
installs it; CI runs as root) and are skipped, saying why, where it is not, except
under CI (``SPREADRL_REQUIRE_SYSDEPS=1``), where they run and fail without it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import openpyxl
import pytest
from openpyxl.worksheet.formula import ArrayFormula

from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.checker import check_workbook
from spreadrl.env.spreadsheet.recalc import hybrid
from spreadrl.env.spreadsheet.recalc.hybrid import distrust_reason, untrusted_cells
from spreadrl.env.spreadsheet.recalc.values import load_values
from tests.sysdeps import needs_libreoffice

needs_lo = needs_libreoffice  # skips without LibreOffice, except under CI: tests/sysdeps.py


@pytest.mark.parametrize(
    ("formula", "reason"),
    [
        ("=SUM(A1:A3)", ""),
        ("=A1&B1", ""),
        ("=YEARFRAC(A1,B1)", ""),
        ("=YEARFRAC(A1,B1,1)", "YEARFRAC with a basis"),
        ('=TEXT(A1,"mmm")', "TEXT format codes"),
        ('="TEXT(A1)"&A2', ""),  # inside a string literal
        ("=MATCH(5,A1:A4,-1)", "MATCH -1"),
        ("=MATCH(5,A1:A4,0)", ""),
        ("=LOOKUP(2,A1:A3,B1:B3)", "LOOKUP vector/array form"),
        ("=VLOOKUP(2,A1:B3,2)", "VLOOKUP approximate match"),
        ("=VLOOKUP(2,A1:B3,2,TRUE)", "VLOOKUP approximate match"),
        ("=VLOOKUP(2,A1:B3,2,FALSE)", ""),
        ("=HLOOKUP(2,A1:C2,2,0)", ""),
        ("=XLOOKUP(2,A1:A3,B1:B3)", ""),
        ("=IF(A1>0,VLOOKUP(A1,T1:U9,2,1),0)", "VLOOKUP approximate match"),
    ],
)
def test_distrust_reason(formula: str, reason: str) -> None:
    assert distrust_reason(formula) == reason


def _workbook(path: Path) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"], ws["A3"] = 1234.5, 2, 3
    ws["B1"] = '=TEXT(A1,"$#,##0")'  # Excel: "$1,235"; IronCalc 0.9 rounds to "$1,234"
    ws["C1"] = '=B1&"!"'  # trusted, but depends on B1
    ws["B2"] = "=SUM(A2:A3)"
    ws["B3"] = "=NOSUCHFUNCTION(1)"
    ws["D1"] = ArrayFormula("D1:D2", "=A2:A3*2")
    wb.save(path)
    return path


def test_untrusted_cells_lists_functions_errors_and_array_ranges(tmp_path: Path) -> None:
    import ironcalc

    path = _workbook(tmp_path / "w.xlsx")
    model = ironcalc.load_from_xlsx(str(path))
    model.evaluate()
    reasons = untrusted_cells(model, ["Sheet"], path)
    assert reasons == {
        (0, 1, 2): "TEXT format codes",
        (0, 3, 2): "IronCalc could not evaluate it (#NAME?)",
        (0, 1, 4): "array formula",
        (0, 2, 4): "array formula",
    }


@needs_lo
def test_hybrid_takes_libreoffice_values_and_reevaluates_dependents(tmp_path: Path) -> None:
    path = _workbook(tmp_path / "w.xlsx")
    book = load_values(path, engine="hybrid", recalc=True)
    assert book.value("Sheet", 1, 2) == "$1,235"
    assert book.cell_engine("Sheet", 1, 2) == "libreoffice"
    assert book.formula("Sheet", 1, 2) == '=TEXT(A1,"$#,##0")'  # the formula, not the constant
    assert book.value("Sheet", 1, 3) == "$1,235!"  # recomputed by IronCalc from the new B1
    assert book.cell_engine("Sheet", 1, 3) == "ironcalc"
    assert book.value("Sheet", 2, 2) == 5 and book.cell_engine("Sheet", 2, 2) == "ironcalc"
    assert [book.value("Sheet", r, 4) for r in (1, 2)] == [4, 6]
    # no engine knows the function: IronCalc's #NAME? stays, never a value
    assert book.value("Sheet", 3, 2) == "#NAME?"


@needs_lo
def test_checker_hybrid_records_engines_and_never_passes_an_unknown_function(
    tmp_path: Path,
) -> None:
    output = _workbook(tmp_path / "out.xlsx")
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["B1"], ws["C1"], ws["B2"], ws["B3"] = "$1,235", "$1,235!", 5, 7
    wb.save(tmp_path / "answer.xlsx")
    result = check_workbook(output, tmp_path / "answer.xlsx", "B1:C3", engine="hybrid")
    assert [m.cell for m in result.mismatches] == ["B3"]
    assert "could not evaluate" in result.mismatches[0].reason
    assert result.cell_engines["Sheet!B1"] == "libreoffice"
    assert result.cell_engines["Sheet!C1"] == "ironcalc"
    ironcalc_only = check_workbook(output, tmp_path / "answer.xlsx", "B1:C1", engine="ironcalc")
    assert not ironcalc_only.passed  # IronCalc alone says "$1,234"


@needs_lo
def test_one_persistent_libreoffice_serves_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine

    monkeypatch.setenv("SPREADRL_LIBREOFFICE", "process")  # the machine service: below

    engine = LibreOfficeEngine(persistent=True)
    path = _workbook(tmp_path / "w.xlsx")
    engine.recalculate(path, tmp_path / "a.xlsx")
    pid = engine.server._proc.pid
    engine.recalculate(path, tmp_path / "b.xlsx")
    assert engine.server._proc.pid == pid
    values = engine.evaluate(tmp_path / "a.xlsx")
    assert values["Sheet"]["B1"] == "$1,235"


def test_without_libreoffice_hybrid_is_ironcalc_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(recalc, "find_soffice", lambda: None)
    monkeypatch.setattr(hybrid, "_warned", False)
    path = _workbook(tmp_path / "w.xlsx")
    with caplog.at_level(logging.WARNING, logger="spreadrl.env.spreadsheet.recalc.hybrid"):
        first = load_values(path, engine="hybrid", recalc=True)
        load_values(path, engine="hybrid", recalc=True)
    plain = load_values(path, engine="ironcalc", recalc=True)
    assert first.value("Sheet", 1, 2) == plain.value("Sheet", 1, 2)
    assert first.cell_engine("Sheet", 1, 2) == "ironcalc"
    warnings = [r for r in caplog.records if "not installed" in r.getMessage()]
    assert len(warnings) == 1


def test_base_conversions_go_to_formulas_where_ironcalc_gives_the_wrong_error(
    tmp_path: Path,
) -> None:
    """Excel: BIN2OCT of a letter is #NUM! (IronCalc 0.9 says #VALUE!; xlcalculator's BASES.xlsx)."""
    pytest.importorskip(
        "formulas", reason="the 'formulas' package (spreadrl[recalc]) is not installed"
    )
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"], ws["A3"] = "A", "101", 7
    ws["B1"] = "=BIN2OCT(A1)"
    ws["B2"] = "=BIN2DEC(A2)"
    ws["B3"] = "=DEC2BIN(A3)"  # DEC2* stays with IronCalc
    ws["C2"] = "=B2*2"  # depends on a formulas-made value
    wb.save(tmp_path / "b.xlsx")
    plain = load_values(tmp_path / "b.xlsx", engine="ironcalc", recalc=True)
    assert plain.value("Sheet", 1, 2) == "#VALUE!"
    book = load_values(tmp_path / "b.xlsx", engine="hybrid", recalc=True)
    # not a binary number: Excel's documented #NUM!, decided before any engine
    # (spreadrl.env.spreadsheet.recalc.excel_rules; formulas would accept a sign, HEX2DEC("-A"))
    assert book.value("Sheet", 1, 2) == "#NUM!"
    assert book.cell_engine("Sheet", 1, 2) == "ironcalc+excel-rules"
    assert book.value("Sheet", 2, 2) == 5 and book.cell_engine("Sheet", 2, 2) == "formulas"
    assert book.value("Sheet", 3, 2) == "111" and book.cell_engine("Sheet", 3, 2) == "ironcalc"
    assert book.value("Sheet", 2, 3) == 10


@needs_lo
def test_a_forked_child_starts_its_own_libreoffice_and_leaves_the_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine

    monkeypatch.setenv("SPREADRL_LIBREOFFICE", "process")  # per-process servers and fork

    engine = LibreOfficeEngine(persistent=True)
    path = _workbook(tmp_path / "w.xlsx")
    engine.recalculate(path, tmp_path / "parent.xlsx")
    parent_pid, profile = engine.server._proc.pid, engine.server._profile.name
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            engine.recalculate(path, tmp_path / "child.xlsx")
            ok = engine.server._proc.pid != parent_pid
            engine.server.close()
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tmp_path / "child.xlsx").is_file()
    assert Path(profile).is_dir() and engine.server._proc.pid == parent_pid
    engine.recalculate(path, tmp_path / "again.xlsx")  # the parent's server still answers


def test_an_error_input_of_a_base_conversion_is_passed_on_not_read_as_text(tmp_path: Path) -> None:
    """Excel: BIN2DEC of a cell holding #N/A is #N/A (formulas read it as text: #NUM!)."""
    pytest.importorskip(
        "formulas", reason="the 'formulas' package (spreadrl[recalc]) is not installed"
    )
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"] = "=NA()", "=1/0"
    ws["B1"], ws["B2"] = "=BIN2DEC(A1)", "=HEX2OCT(A2)"
    wb.save(tmp_path / "e.xlsx")
    book = load_values(tmp_path / "e.xlsx", engine="hybrid", recalc=True)
    assert book.value("Sheet", 1, 2) == "#N/A"
    assert book.value("Sheet", 2, 2) == "#DIV/0!"
    assert book.cell_engine("Sheet", 1, 2) == "ironcalc"


@needs_lo
def test_a_value_ironcalc_refuses_to_take_keeps_ironcalcs_and_does_not_crash(
    tmp_path: Path,
) -> None:
    """An array formula's cells can be refused by IronCalc's setters (spill ranges);
    the held-out corpus (formulas 1.2.0's test.xlsx) crashed the hybrid there."""
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"], ws["A3"] = 1.5, "=1/0", 3.5
    ws["C1"] = ArrayFormula("C1:C3", '=TEXT(A1:A3,"0.0")')  # C2: an error, in a spill cell
    ws["D1"] = ArrayFormula("D1:D2", "=COLUMN(A1:C3 B2:D3)")  # a rule cannot rewrite it
    ws["E1"] = "=SUM(A1:A3 A3:A4)"
    wb.save(tmp_path / "a.xlsx")
    book = load_values(tmp_path / "a.xlsx", engine="hybrid", recalc=True)
    assert book.value("Sheet", 1, 3) == "1.5"
    assert book.value("Sheet", 1, 5) == 3.5


def test_write_back_says_when_ironcalc_refuses_a_value(tmp_path: Path) -> None:
    """IronCalc will not take an error value into an array formula's range; the hybrid
    keeps IronCalc's value there instead of failing the whole check."""
    import ironcalc

    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"] = 1, 2
    ws["C1"] = ArrayFormula("C1:C4", "=A1:A2*2")
    wb.save(tmp_path / "s.xlsx")
    model = ironcalc.load_from_xlsx(str(tmp_path / "s.xlsx"))
    model.evaluate()
    assert hybrid._write_back(model, (0, 3, 3), "#N/A") is False
    assert hybrid._write_back(model, (0, 1, 2), "#N/A") is True
    assert model.get_cell_value(0, 1, 2) == "#N/A"


@pytest.mark.parametrize(
    ("ours", "theirs", "formula", "take"),
    [
        ("#REF!", 4.0, "=TREND(A1:A3,B1:B3,4)", True),  # an ordinary IronCalc error
        (2.0, "#NAME?", "=XLOOKUP(1,A1:A3,B1:B3)", False),  # a function LibreOffice lacks
        (2.0, "Err:502", "=TEXT(A1,B1)", False),  # LibreOffice's own code
        ("#VALUE!", "#N/A", "=MATCH(A1,B1:B3,-1)", False),  # two errors: IronCalc's stays
        ("#ERROR!", "#DIV/0!", "=A1/B1", True),  # an error Excel never gives
        ("#NUM!", 2958466.0, "=DATE(B1,C1,D1)", False),  # LibreOffice's calendar goes on
        ("#VALUE!", 1800, "=YEAR(C3)", False),
        ("$1,234", "$1,235", '=TEXT(A1,"$#,##0")', True),
    ],
)
def test_whose_value_an_untrusted_cell_keeps(ours, theirs, formula: str, take: bool) -> None:
    assert hybrid._prefer_libreoffice(ours, theirs, formula) is take


def test_every_ironcalc_error_is_untrusted(tmp_path: Path) -> None:
    import ironcalc

    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"], ws["A3"] = 1, 2, 3
    ws["B1"] = "=TREND({1,2,3},{1,2,3},4)"  # Excel: 4; IronCalc: #REF!
    ws["B2"] = "=1/0"
    ws["B3"] = "=A1+1"
    wb.save(tmp_path / "e.xlsx")
    model = ironcalc.load_from_xlsx(str(tmp_path / "e.xlsx"))
    model.evaluate()
    assert untrusted_cells(model, ["Sheet"], tmp_path / "e.xlsx") == {
        (0, 1, 2): "IronCalc gave an error (#REF!)",
        (0, 2, 2): "IronCalc gave an error (#DIV/0!)",
    }


@needs_lo
def test_an_ordinary_ironcalc_error_takes_libreoffices_value(tmp_path: Path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws["A1"], ws["A2"], ws["A3"] = 1, 2, 3
    ws["B1"] = "=TREND({1,2,3},{1,2,3},4)"
    ws["B2"] = "=1/0"  # both engines say #DIV/0!: stays
    ws["C1"] = "=B1*10"  # follows the corrected B1
    wb.save(tmp_path / "e.xlsx")
    book = load_values(tmp_path / "e.xlsx", engine="hybrid")
    assert book.value("Sheet", 1, 2) == 4 and book.cell_engine("Sheet", 1, 2) == "libreoffice"
    assert book.value("Sheet", 2, 2) == "#DIV/0!"
    assert book.value("Sheet", 1, 3) == 40

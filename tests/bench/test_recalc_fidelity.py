"""The recalculation fidelity bench on a slice of the development corpus (Excel-saved files)."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import openpyxl
import pytest
from typer.testing import CliRunner

from spreadrl.bench.recalc_fidelity import (
    excel_saved,
    formula_cells,
    formula_functions,
    run_fidelity,
)
from spreadrl.cli.main import app
from spreadrl.errors import SpreadrlError

# xlrd's test workbooks define print areas of whole rows, which openpyxl cannot set and
# says so on every load; the cells this bench reads are unaffected
pytestmark = pytest.mark.filterwarnings("ignore:Print area cannot be set:UserWarning")

SLICE = Path(__file__).parents[1] / "fixtures" / "recalc_corpus"
EXCEL_BOOKS = [
    "CONCATENATE.xlsx",
    "DATE.xlsx",
    "VLOOKUP.xlsx",
    "YEAR.xlsx",
    "YEARFRAC.xlsx",
    "reveng1.xlsx",
]


def test_formula_functions_ignores_strings_and_prefixes() -> None:
    assert formula_functions('=_xlfn.CONCAT(A1,"SUM(x)")&TEXT(B2,"0")') == ["CONCAT", "TEXT"]
    assert formula_functions("=A1+B1") == []


def test_slice_counts_every_formula_cell_and_skips_non_excel_files() -> None:
    tallies, skipped = run_fidelity(SLICE, ["ironcalc"])
    tally = tallies["ironcalc"]
    assert skipped == {"SQRT.xlsx": "not saved by Excel"}
    assert not excel_saved(SLICE / "SQRT.xlsx") and excel_saved(SLICE / "YEAR.xlsx")
    expected_cells = sum(len(formula_cells(SLICE / name)) for name in EXCEL_BOOKS)
    assert tally.workbooks == len(EXCEL_BOOKS)
    assert tally.cells + tally.volatile_skipped == expected_cells > 20
    assert 0 < tally.reproduced <= tally.cells
    assert tally.cells - tally.reproduced == len(tally.misses)
    assert tally.workbooks_whole == len(EXCEL_BOOKS) - len({m.workbook for m in tally.misses})
    assert sum(stats[0] for stats in tally.per_function.values()) >= tally.cells


def _tamper_first_numeric_formula(src: Path, dst: Path) -> str:
    """Copy ``src`` with Excel's cached value of one numeric formula cell changed; its ref."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        ref = ""
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                pattern = re.compile(
                    rb'<c r="([A-Z]+\d+)"(?![^>]*t=")[^>]*><f>[^<]*</f><v>([-\d.E]+)</v>'
                )
                match = pattern.search(data)
                assert match is not None
                ref = match.group(1).decode()
                start, end = match.span(2)
                data = data[:start] + str(float(match.group(2)) + 1000.5).encode() + data[end:]
            zout.writestr(item, data)
    return ref


def test_a_wrong_cached_value_is_reported_as_a_miss(tmp_path: Path) -> None:
    shutil.copy(SLICE / "DATE.xlsx", tmp_path / "clean.xlsx")
    ref = _tamper_first_numeric_formula(SLICE / "DATE.xlsx", tmp_path / "tampered.xlsx")
    tallies, _ = run_fidelity(tmp_path, ["ironcalc"])
    missed = {(m.workbook, m.cell) for m in tallies["ironcalc"].misses}
    assert ("tampered.xlsx", ref) in missed
    assert ("clean.xlsx", ref) not in missed


def test_cli_writes_a_json_report(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app, ["bench", "recalc-fidelity", str(SLICE), "--engine", "ironcalc", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    engine = report["engines"]["ironcalc"]
    assert engine["workbooks"] == len(EXCEL_BOOKS)
    assert engine["cells"] >= engine["reproduced"] > 0
    assert "SQRT.xlsx" in report["skipped"]


def test_cli_rejects_an_unknown_engine_and_an_empty_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "recalc-fidelity", str(SLICE), "--engine", "excel"])
    assert isinstance(result.exception, SpreadrlError) and "'excel'" in str(result.exception)
    wb = openpyxl.Workbook()
    wb.save(tmp_path / "a.txt")
    result = CliRunner().invoke(app, ["bench", "recalc-fidelity", str(tmp_path)])
    assert isinstance(result.exception, SpreadrlError) and "no .xlsx" in str(result.exception)


def test_hybrid_without_libreoffice_says_so(monkeypatch) -> None:
    from spreadrl.env.spreadsheet import recalc

    monkeypatch.setattr(recalc, "find_soffice", lambda: None)
    tallies, _ = run_fidelity(SLICE, ["hybrid"])
    assert "not installed" in tallies["hybrid"].note
    assert tallies["hybrid"].cells > 0


def test_hybrid_reproduces_what_ironcalc_misses_on_the_slice() -> None:
    """YEAR of date text, the intersection operator and _xHHHH_ escapes (excel_rules);
    VLOOKUP/YEARFRAC cells go to LibreOffice where it is installed."""
    from tests.sysdeps import use_libreoffice

    tallies, _ = run_fidelity(SLICE, ["ironcalc", "hybrid"])
    alone, hybrid = tallies["ironcalc"], tallies["hybrid"]
    missed_alone = {(m.workbook, m.sheet, m.cell) for m in alone.misses}
    missed = {(m.workbook, m.sheet, m.cell) for m in hybrid.misses}
    assert {
        ("YEAR.xlsx", "Sheet1", "C5"),
        ("reveng1.xlsx", "ZZZfirstsheet", "C23"),
        ("reveng1.xlsx", "ZZZfirstsheet", "C43"),
        ("reveng1.xlsx", "ZZZfirstsheet", "C46"),
    } <= missed_alone
    assert missed <= missed_alone
    assert hybrid.cell_engines["ironcalc+excel-rules"] >= 4
    if use_libreoffice():  # installed, or required (CI): tests/sysdeps.py
        assert hybrid.reproduced == hybrid.cells and hybrid.workbooks_whole == len(EXCEL_BOOKS)
    else:
        assert not missed & {
            ("YEAR.xlsx", "Sheet1", "C5"),
            ("reveng1.xlsx", "ZZZfirstsheet", "C23"),
        }

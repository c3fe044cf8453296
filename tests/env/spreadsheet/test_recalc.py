"""Recalculation engines: IronCalc computes formulas openpyxl left without values."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.recalc import available_engines, get_engine
from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine
from spreadrl.env.spreadsheet.recalc.values import has_uncached_formulas, load_values
from spreadrl.errors import MissingDependencyError, SpreadrlError, WorkbookError


def formula_book(path: Path) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Data, 1"
    ws["A1"], ws["A2"], ws["A3"] = 2, 3, "=SUM(A1:A2)"
    ws["B1"] = "=1/0"
    ws["B2"] = "=FOOBARBAZ(1)"
    ws["B3"] = "=DATE(2024,1,5)"
    ws["C1"] = dt.datetime(2024, 1, 5, 6, 0)
    wb.create_sheet("Two")["A1"] = "='Data, 1'!A3*2"
    wb.save(path)
    return path


def test_ironcalc_evaluate_computes_formulas_and_errors(tmp_path: Path) -> None:
    values = get_engine("ironcalc").evaluate(formula_book(tmp_path / "f.xlsx"))
    assert values["Data, 1"]["A3"] == 5.0
    assert values["Data, 1"]["B1"] == "#DIV/0!"
    assert values["Data, 1"]["B2"] == "#NAME?"
    assert values["Data, 1"]["B3"] == 45296.0  # serial number, untyped
    assert values["Two"] == {"A1": 10.0}


def test_ironcalc_recalculate_writes_cached_values(tmp_path: Path) -> None:
    src = formula_book(tmp_path / "f.xlsx")
    assert has_uncached_formulas(src)
    dst = tmp_path / "out" / "g.xlsx"
    get_engine().recalculate(src, dst)
    assert not has_uncached_formulas(dst)
    cached = openpyxl.load_workbook(dst, data_only=True)
    assert cached["Two"]["A1"].value == 10
    get_engine().recalculate(src)  # in place
    assert not has_uncached_formulas(src)
    assert not list(tmp_path.glob(".recalc-*"))


def test_load_values_types_like_openpyxl(tmp_path: Path) -> None:
    book = load_values(formula_book(tmp_path / "f.xlsx"))
    assert book.recalculated and book.engine == "ironcalc"
    assert book.value("Data, 1", 3, 1) == 5
    # as in Excel, a recalculated =DATE() in a General cell stays a serial number
    assert book.value("Data, 1", 3, 2) == 45296
    assert book.value("Data, 1", 1, 3) == dt.datetime(2024, 1, 5, 6, 0)
    assert book.value("Data, 1", 9, 9) is None
    assert book.formula("Data, 1", 1, 1) is None and book.formula("Data, 1", 3, 1)
    assert book.find_sheet("two") == "Two" and book.find_sheet("Three") is None
    assert book.max_row("Data, 1") == 3


def test_cached_workbook_is_not_recalculated(tmp_path: Path) -> None:
    wb = openpyxl.Workbook()
    wb.active["A1"] = 1
    wb.active["A2"] = dt.time(13, 30)
    wb.save(tmp_path / "v.xlsx")
    assert not has_uncached_formulas(tmp_path / "v.xlsx")
    book = load_values(tmp_path / "v.xlsx")
    assert not book.recalculated
    assert book.value("Sheet", 2, 1) == dt.time(13, 30)


def test_bad_files_raise_workbook_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.xlsx"
    junk.write_text("junk")
    with pytest.raises(WorkbookError, match="junk.xlsx"):
        get_engine().evaluate(junk)
    with pytest.raises(WorkbookError, match="missing.xlsx"):
        load_values(tmp_path / "missing.xlsx")


def test_unknown_engine_lists_available() -> None:
    with pytest.raises(SpreadrlError, match="available here: ironcalc"):
        get_engine("excel")
    assert available_engines()[0] == "ironcalc"


def test_libreoffice_missing_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recalc, "find_soffice", lambda: None)
    with pytest.raises(MissingDependencyError, match="soffice.*on PATH") as info:
        get_engine("libreoffice")
    assert "ironcalc" in str(info.value)
    assert "libreoffice" not in available_engines()


def test_libreoffice_failure_is_a_workbook_error(tmp_path: Path) -> None:
    fake = tmp_path / "soffice"
    fake.write_text("#!/bin/sh\necho 'boom' >&2\nexit 3\n")
    fake.chmod(0o755)
    src = formula_book(tmp_path / "f.xlsx")
    with pytest.raises(WorkbookError, match="LibreOffice could not recalculate.*boom"):
        LibreOfficeEngine(soffice=str(fake)).recalculate(src, tmp_path / "g.xlsx")


def test_libreoffice_engine_round_trip_with_stub(tmp_path: Path) -> None:
    """A stand-in soffice that copies the input shows the file plumbing and arguments."""
    fake = tmp_path / "soffice"
    fake.write_text(
        '#!/bin/sh\nfor a; do last="$a"; done\nwhile [ "$1" != "--outdir" ]; do shift; done\n'
        'mkdir -p "$2" && cp "$last" "$2/$(basename "$last")"\n'
    )
    fake.chmod(0o755)
    src = tmp_path / "v.xlsx"
    wb = openpyxl.Workbook()
    wb.active["B2"] = 7
    wb.save(src)
    assert LibreOfficeEngine(soffice=str(fake)).evaluate(src) == {"Sheet": {"B2": 7.0}}

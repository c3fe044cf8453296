"""`spreadrl bench recalc-fidelity DIR`: how often a recalculation engine reproduces Excel.

The checker's reward depends on our recalculation whenever an agent writes
formulas with openpyxl (no cached values). This bench measures that on real
workbooks saved by Excel: every formula cell's cached value (Excel's own) is
the expectation; the workbook is re-saved by openpyxl (which drops the cached
values, exactly what an agent's output looks like), recalculated by each
engine, and every formula cell is compared with the checker's rules
(:func:`spreadrl.env.spreadsheet.checker.values_match`). Volatile cells (NOW, TODAY,
RAND, ...) cannot be reproduced by anyone and are counted apart.

A workbook counts only if it was saved by Excel (``docProps/app.xml`` names
Microsoft Excel or Macintosh Excel) with a cached value on every formula.
``scripts/build_recalc_corpus.sh`` builds the development corpus.
"""

from __future__ import annotations

import re
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.worksheet.formula import ArrayFormula

from spreadrl.archive_gate import WorkbookRefused, check_archive
from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.checker import column_name, values_match
from spreadrl.env.spreadsheet.recalc import libreoffice
from spreadrl.env.spreadsheet.recalc.values import has_uncached_formulas, load_values
from spreadrl.errors import SpreadrlError

VOLATILE = ("NOW", "TODAY", "RAND", "RANDBETWEEN", "RANDARRAY", "INFO", "CELL")
_FUNCTION_RE = re.compile(r"(?<![A-Za-z0-9_.])(?:_xlfn\.|_xlws\.)?([A-Za-z][A-Za-z0-9.]*)\s*\(")
_STRING_RE = re.compile(r'"(?:[^"]|"")*"')


def formula_functions(formula: str) -> list[str]:
    """Upper-case function names called in ``formula`` (string literals ignored), sorted, unique."""
    text = _STRING_RE.sub('""', formula)
    return sorted({name.upper() for name in _FUNCTION_RE.findall(text)})


def excel_saved(path: Path) -> bool:
    """True when ``docProps/app.xml`` says Microsoft Excel wrote the file."""
    try:
        check_archive(path)
        with zipfile.ZipFile(path) as archive:
            app = archive.read("docProps/app.xml").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile, WorkbookRefused):
        return False
    match = re.search(r"<(?:\w+:)?Application>([^<]*)<", app)
    return bool(match and match.group(1).strip().startswith("Microsoft"))


def find_workbooks(folder: Path) -> list[Path]:
    """Every .xlsx/.xlsm under ``folder`` (recursive, sorted), lock files skipped."""
    return sorted(
        p
        for p in Path(folder).rglob("*")
        if p.suffix.lower() in (".xlsx", ".xlsm") and not p.name.startswith("~$") and p.is_file()
    )


@dataclass
class CellMiss:
    """One formula cell an engine did not reproduce."""

    workbook: str
    sheet: str
    cell: str
    formula: str
    expected: object  # cell values of any type, compared and shown with repr
    actual: object
    engine: str


@dataclass
class EngineTally:
    """Cells and workbooks reproduced by one engine, overall and per function."""

    engine: str
    cells: int = 0
    reproduced: int = 0
    workbooks: int = 0
    workbooks_whole: int = 0
    volatile_skipped: int = 0
    seconds: float = 0.0
    failed_workbooks: list[str] = field(default_factory=list)
    per_function: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    misses: list[CellMiss] = field(default_factory=list)
    cell_engines: Counter = field(default_factory=Counter)
    note: str = ""

    def to_json(self, worst: int) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "cells": self.cells,
            "reproduced": self.reproduced,
            "cell_rate": self.reproduced / max(self.cells, 1),
            "workbooks": self.workbooks,
            "workbooks_whole": self.workbooks_whole,
            "volatile_skipped": self.volatile_skipped,
            "seconds": round(self.seconds, 2),
            "failed_workbooks": self.failed_workbooks,
            "cells_by_engine": dict(self.cell_engines),
            "per_function": {
                k: {"cells": v[0], "reproduced": v[1]} for k, v in sorted(self.per_function.items())
            },
            "worst": [
                {
                    "workbook": m.workbook,
                    "cell": f"{m.sheet}!{m.cell}",
                    "formula": m.formula,
                    "expected": repr(m.expected),
                    "actual": repr(m.actual),
                    "engine": m.engine,
                }
                for m in self.misses[:worst]
            ],
            "note": self.note,
        }


def formula_cells(path: Path) -> dict[tuple[str, int, int], str]:
    """(sheet, row, column) -> formula text of every formula cell, as openpyxl reads them.

    Shared formulas come back expanded per cell; an array (CSE) formula is its
    anchor cell, written ``{=...}``.
    """

    check_archive(path)
    book = openpyxl.load_workbook(path, data_only=False)
    cells: dict[tuple[str, int, int], str] = {}
    for ws in book.worksheets:
        # the stored cells only: iter_rows() walks the whole used rectangle, and one cell
        # at XFD1048576 (libxlsxwriter's test files) makes that 17 billion cells
        for cell in sorted(ws._cells.values(), key=lambda c: (c.row, c.column)):
            value = cell.value
            if isinstance(value, ArrayFormula):
                cells[(ws.title, cell.row, cell.column)] = "{" + str(value.text) + "}"
            elif isinstance(value, str) and cell.data_type == "f":
                cells[(ws.title, cell.row, cell.column)] = value
    return cells


def strip_cached(src: Path, dst: Path) -> None:
    """Re-save ``src`` with openpyxl: formulas kept, cached values dropped (an agent's output)."""

    keep_vba = src.suffix.lower() == ".xlsm"
    check_archive(src)
    book = openpyxl.load_workbook(src, keep_vba=keep_vba)
    book.save(dst)


def _is_volatile(formula: str) -> bool:
    return any(name in VOLATILE for name in formula_functions(formula))


def measure_workbook(
    path: Path, engines: list[str], tallies: dict[str, EngineTally], tmp: Path
) -> str:
    """Compare every formula cell of one workbook per engine; '' or why it was skipped."""
    if not excel_saved(path):
        return "not saved by Excel"
    try:
        if has_uncached_formulas(path):
            return "some formula has no cached value"
        cells = formula_cells(path)
        if not cells:
            return "no formula cells"
        cached = load_values(path, recalc=False)
        stripped = tmp / f"stripped{path.suffix.lower()}"
        strip_cached(path, stripped)
    except (SpreadrlError, OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        return f"unreadable ({type(exc).__name__}: {str(exc)[:120]})"
    expected: dict[tuple[str, int, int], Any] = {}
    for sheet, row, column in cells:
        name = cached.find_sheet(sheet)
        expected[(sheet, row, column)] = cached.value(name, row, column) if name else None
    for engine in engines:
        tally = tallies[engine]
        tally.workbooks += 1
        started = time.perf_counter()
        try:
            book = load_values(stripped, engine=engine, recalc=True)
        except SpreadrlError as exc:
            book = None
            tally.failed_workbooks.append(f"{path.name}: {str(exc)[:200]}")
        tally.seconds += time.perf_counter() - started
        whole = True
        for (sheet, row, column), formula in cells.items():
            if _is_volatile(formula):
                tally.volatile_skipped += 1
                continue
            tally.cells += 1
            actual: object = None
            produced_by = engine
            if book is not None:
                name = book.find_sheet(sheet)
                if name is not None:
                    actual = book.value(name, row, column)
                    produced_by = book.cell_engine(name, row, column)
            tally.cell_engines[produced_by] += 1
            want = expected[(sheet, row, column)]
            ok = book is not None and values_match(want, actual)
            for function in formula_functions(formula) or ["(no function)"]:
                stats = tally.per_function[function]
                stats[0] += 1
                stats[1] += ok
            if ok:
                tally.reproduced += 1
            else:
                whole = False
                tally.misses.append(
                    CellMiss(
                        path.name,
                        sheet,
                        f"{column_name(column)}{row}",
                        formula,
                        want,
                        actual,
                        produced_by,
                    )
                )
        tally.workbooks_whole += whole
    return ""


def run_fidelity(folder: Path, engines: list[str]) -> tuple[dict[str, EngineTally], dict[str, str]]:
    """Measure every workbook under ``folder``; returns tallies per engine and skipped files."""
    workbooks = find_workbooks(folder)
    if not workbooks:
        raise SpreadrlError(f"{folder}: no .xlsx/.xlsm workbooks found")
    tallies = {engine: EngineTally(engine) for engine in engines}
    if "hybrid" in tallies and (recalc.find_soffice() is None or libreoffice.uno_python() is None):
        tallies["hybrid"].note = (
            "LibreOffice (soffice + python3-uno) is not installed: the hybrid figure is "
            "IronCalc (+ formulas) only"
        )
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="spreadrl-fidelity-") as tmp:
        for path in workbooks:
            reason = measure_workbook(path, engines, tallies, Path(tmp))
            if reason:
                skipped[str(path.relative_to(folder))] = reason
    return tallies, skipped


def fidelity_report(
    folder: Path, tallies: dict[str, EngineTally], skipped: dict[str, str], worst: int
) -> dict[str, Any]:
    """The full report ``--json`` writes: skipped files and each engine's tally."""
    return {
        "folder": str(folder),
        "skipped": skipped,
        "engines": {name: tally.to_json(worst) for name, tally in tallies.items()},
    }

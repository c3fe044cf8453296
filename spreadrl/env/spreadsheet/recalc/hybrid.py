"""Hybrid recalculation: IronCalc first, LibreOffice for the cells IronCalc cannot be trusted on.

IronCalc is fast and in process, and reproduces Excel on most cells; it is
known to differ from Excel on a few: legacy array (CSE) formulas, YEARFRAC
with a basis, TEXT with format codes, MATCH(..., -1), the LOOKUP forms,
approximate VLOOKUP/HLOOKUP, and functions it lacks or cannot evaluate
(``#NAME?``, ``#N/IMPL!``, ``#ERROR!``); measured on real Excel-saved workbooks
(docs/benchmarks.md). Those cells are recomputed by LibreOffice (one
persistent process over UNO, :mod:`spreadrl.env.spreadsheet.recalc.libreoffice`). Base
conversions (BIN2*, OCT2*, HEX2*) go to the ``formulas`` package instead,
which reproduces Excel there where both others do not. The second engine's
values are written into the IronCalc model as constants and the model is
evaluated again, so the cells that depend on them see the corrected values.
Before any of this, formulas that Excel reads differently from IronCalc (the
intersection operator, ``_xHHHH_`` escapes, a few documented argument rules)
are rewritten so IronCalc computes Excel's value
(:mod:`spreadrl.env.spreadsheet.recalc.excel_rules`; those cells are recorded as
``ironcalc+excel-rules``). Every cell records which engine produced it
(``WorkbookValues.cell_engine``).

Never a false pass: when LibreOffice fails on a cell too (its own error
codes such as ``Err:502``), the IronCalc value stays, and an engine failure
(``#NAME?``/``#N/IMPL!``) stays a mismatch in the checker. Never a false fail
either: LibreOffice dying under a workbook (killed, out of memory) is retried once
on a fresh soffice, and a second death raises EngineCrashed instead of letting
IronCalc's untrusted values score it. Without
LibreOffice the hybrid says so once (a warning) and is IronCalc alone.
"""

from __future__ import annotations

import logging
import re
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ironcalc
from ironcalc import Model

from spreadrl.archive_gate import check_archive
from spreadrl.cells import range_cells
from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.recalc.errors import EXCEL_ERRORS, UNEVALUATED
from spreadrl.env.spreadsheet.recalc.excel_rules import UNKNOWN, function_calls, rewrite_formula
from spreadrl.env.spreadsheet.recalc.excel_text import builds_text_from_values
from spreadrl.env.spreadsheet.recalc.ironcalc_engine import _dump, save_model
from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine, uno_python
from spreadrl.env.spreadsheet.recalc.locales import DEFAULT_LOCALE, current_locale
from spreadrl.env.spreadsheet.recalc.xlsx_scan import XlsxScan, load_model, scan_xlsx
from spreadrl.errors import EngineCrashed, SpreadrlError, WorkbookError

log = logging.getLogger(__name__)

# Every error IronCalc returns is a result it cannot vouch for: Excel may give a value
# there, or another error. All of them go to LibreOffice; see _prefer for whose stays.
_ERROR_LIKE = re.compile(r"^#[A-Z0-9/_]+[!?]?$|^Err:\d+$")
_STRING = re.compile(r'"(?:[^"]|"")*"')
_NS = r"(?:\w+:)?"
_ARRAY_F = re.compile(rb"<" + _NS.encode() + rb"f\b[^>]*\bt=\"array\"[^>]*\bref=\"([A-Z0-9:$]+)\"")
_ARRAY_F2 = re.compile(rb"<" + _NS.encode() + rb"f\b[^>]*\bref=\"([A-Z0-9:$]+)\"[^>]*\bt=\"array\"")
_CELL_REF = re.compile(r"^\$?([A-Z]{1,3})\$?(\d+)$")
_warned = False


def _is_error(value: object) -> bool:
    return isinstance(value, str) and bool(_ERROR_LIKE.match(value))


# formulas 1.3 reproduces Excel on every BIN2*/OCT2*/HEX2* cell of the development corpus,
# where IronCalc misses 9% (#VALUE! for #NUM!) and LibreOffice more; on DEC2* it is worse
# than IronCalc (negative numbers with places), so DEC2* stays with IronCalc.
BASE_FUNCTIONS = re.compile(r"(?<![A-Z0-9_.])(?:BIN|OCT|HEX)2(?:BIN|OCT|DEC|HEX)\s*\(")
BASE_REASON = "base conversion (recomputed by formulas)"


_LISTED = re.compile(r"(?:YEARFRAC|TEXT|MATCH|LOOKUP)\s*\(")


def distrust_reason(formula: str) -> str:
    """Why IronCalc's value of ``formula`` cannot be trusted to be Excel's ('' when it can)."""
    code = _STRING.sub('""', formula.upper())
    if "(" not in code:
        return ""
    if BASE_FUNCTIONS.search(code):
        return BASE_REASON
    if not _LISTED.search(code):
        return ""
    calls: dict[str, list[list[str]]] = {}
    for name, _start, _end, spans in function_calls(code):
        calls.setdefault(name, []).append([code[a:b].strip() for a, b in spans])
    if any(len(args) >= 3 for args in calls.get("YEARFRAC", [])):
        return "YEARFRAC with a basis"
    if "TEXT" in calls:
        return "TEXT format codes"
    if any(len(args) >= 3 and args[2].replace(" ", "") == "-1" for args in calls.get("MATCH", [])):
        return "MATCH -1"
    if "LOOKUP" in calls:
        return "LOOKUP vector/array form"
    for name in ("VLOOKUP", "HLOOKUP"):
        for args in calls.get(name, []):
            if len(args) < 4 or args[3] not in ("FALSE", "0"):
                return f"{name} approximate match"
    return ""


_LOCALE_FUNCTIONS = re.compile(
    r"(?<![A-Z0-9_.])(?:TEXT|DOLLAR|FIXED|VALUE|DATEVALUE|TIMEVALUE|NUMBERVALUE)\s*\("
)
LOCALE_REASON = "locale-dependent text"


def locale_reason(formula: str) -> str:
    """Why a formula's value depends on the recalculation locale ('' when it does not).

    The hybrid keeps IronCalc in ``en`` (its other locales change how the formulas it
    rewrites parse), so outside en-US these cells go to LibreOffice, which renders in
    the asked locale: text from number formats, and numbers joined into text.
    """
    code = _STRING.sub('""', formula.upper())
    if _LOCALE_FUNCTIONS.search(code) or builds_text_from_values(formula):
        return LOCALE_REASON
    return ""


def _array_cells(path: Path, names: list[str]) -> dict[str, list[str]]:
    """Sheet name -> cell ranges of the array (CSE) formulas of ``path`` (from the sheet XML)."""
    ranges: dict[str, list[str]] = {}
    check_archive(path)
    try:
        with zipfile.ZipFile(path) as archive:
            sheet_files = [n for n in archive.namelist() if n.startswith("xl/worksheets/sheet")]
            hits = {}
            for name in sheet_files:
                data = archive.read(name)
                if b'"array"' in data:
                    hits[name] = [m.group(1).decode() for m in _ARRAY_F.finditer(data)]
                    hits[name] += [m.group(1).decode() for m in _ARRAY_F2.finditer(data)]
            if not hits:
                return ranges
            workbook = archive.read("xl/workbook.xml").decode("utf-8", "replace")
            rels = archive.read("xl/_rels/workbook.xml.rels").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return ranges
    targets = {}
    for rel in re.finditer(r"<(?:\w+:)?Relationship\b[^>]*>", rels):
        rid = re.search(r'\bId="([^"]+)"', rel.group(0))
        target = re.search(r'\bTarget="([^"]+)"', rel.group(0))
        if rid and target:
            path_in_zip = target.group(1).lstrip("/")
            if not path_in_zip.startswith("xl/"):
                path_in_zip = "xl/" + path_in_zip
            targets[rid.group(1)] = path_in_zip
    for sheet in re.finditer(r"<(?:\w+:)?sheet\b[^>]*>", workbook):
        name = re.search(r'\bname="([^"]*)"', sheet.group(0))
        rid = re.search(r'\br:id="([^"]+)"', sheet.group(0)) or re.search(
            r'\b\w+:id="([^"]+)"', sheet.group(0)
        )
        if name and rid and targets.get(rid.group(1)) in hits:
            import html

            ranges[html.unescape(name.group(1))] = hits[targets[rid.group(1)]]
    return ranges


def _range_keys(model: Model, index: int, ref: str) -> list[tuple[int, int, int]]:
    """The cells of an array formula's range, clipped to the sheet's used area
    (``=First!1:1`` entered as an array spans 16,384 columns)."""
    _, max_row, _, max_column = model.get_sheet_dimensions(index)
    return [
        (index, r, c)
        for r, c in range_cells(ref.replace("$", ""))
        if r <= max_row and c <= max_column
    ]


DATE1904_REASON = "1904 date system (IronCalc counts days from 1900)"


def untrusted_cells(
    model: Model, names: list[str], path: Path, *, date1904: bool = False
) -> dict[tuple[int, int, int], str]:
    """(sheet index, row, column) -> reason, for every cell IronCalc's value is not trusted on.

    ``date1904``: the workbook counts days from 1904-01-01; IronCalc ignores that
    (``DATE(2024,1,5)`` is 45296 where Excel says 43834), LibreOffice honours it, so
    every formula cell of such a workbook is untrusted.
    """
    reasons: dict[tuple[int, int, int], str] = {}
    localized = current_locale() != DEFAULT_LOCALE  # IronCalc stays in en: see locale_reason
    for sheet, row, column in model.get_all_cells():
        formula = model.get_cell_formula(sheet, row, column)
        if formula is None:
            continue
        if date1904:
            reasons[(sheet, row, column)] = DATE1904_REASON
            continue
        value = model.get_cell_value(sheet, row, column)
        reason = distrust_reason(formula) or (localized and locale_reason(formula))
        if _is_error(value) and reason != BASE_REASON:
            why = "could not evaluate it" if value in UNEVALUATED else "gave an error"
            reasons[(sheet, row, column)] = f"IronCalc {why} ({value})"
            continue
        if reason:
            reasons[(sheet, row, column)] = reason
    index = {name: i for i, name in enumerate(names)}
    for sheet_name, refs in _array_cells(path, names).items():
        if sheet_name in index:
            for ref in refs:
                for key in _range_keys(model, index[sheet_name], ref):
                    reasons[key] = "array formula"
    return reasons


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning(message)


def libreoffice_or_none() -> LibreOfficeEngine | None:
    """The persistent LibreOffice engine, or None (warned once) where it is missing."""
    # through the package, so a test can hide LibreOffice
    if recalc.find_soffice() is None or uno_python() is None:
        _warn_once(
            "hybrid recalculation: LibreOffice (soffice + python3-uno) is not installed, so "
            "cells IronCalc is not trusted on keep IronCalc's values (IronCalc-only figures); "
            "install it with `make sysdeps` or `apt-get install libreoffice-calc-nogui python3-uno`"
        )
        return None
    return LibreOfficeEngine(persistent=True)


def _write_back(model: Model, key: tuple[int, int, int], value: object) -> bool:
    """Put a second engine's value into the IronCalc model; False where IronCalc refuses
    (a cell of an array formula's or a spill's range), which keeps IronCalc's value."""
    try:
        _write_value(model, key, value)
    except Exception as exc:  # _ironcalc.WorkbookError, not importable by name
        log.debug("hybrid recalculation: cannot write %r into %s (%s)", value, key, exc)
        return False
    return True


def _write_value(model: Model, key: tuple[int, int, int], value: object) -> None:
    sheet, row, column = key
    if isinstance(value, bool):
        model.update_cell_with_bool(sheet, row, column, value)
    elif isinstance(value, int | float):
        model.update_cell_with_number(sheet, row, column, float(value))
    elif value is None:
        model.update_cell_with_text(sheet, row, column, "")
    elif _is_error(value):
        model.set_user_input(sheet, row, column, str(value))
    else:
        model.update_cell_with_text(sheet, row, column, str(value))


@dataclass
class HybridResult:
    """An evaluated IronCalc model whose untrusted cells hold LibreOffice's values.

    ``cell_engines`` names the engine of every cell LibreOffice supplied, and
    ``formulas`` keeps their formulas (the model now holds constants there).
    """

    model: Model
    sheet_names: list[str]
    cell_engines: dict[tuple[int, int, int], str] = field(default_factory=dict)
    formulas: dict[tuple[int, int, int], str] = field(default_factory=dict)


def load_hybrid(path: Path, scan: XlsxScan | None = None) -> HybridResult:
    """Recalculate ``path`` with IronCalc, then LibreOffice for the untrusted cells.

    ``scan`` is :func:`.xlsx_scan.scan_xlsx` of ``path`` when the caller has it.
    """
    path = Path(path)
    scan = scan_xlsx(path) if scan is None else scan
    model = load_model(path, scan)
    try:
        model.evaluate()
        names = [props["name"] for props in model.get_worksheets_properties()]
    except BaseException as exc:  # IronCalc panics surface as BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise WorkbookError(f"{path}: cannot read workbook ({exc})") from exc
    book = HybridResult(model=model, sheet_names=names)
    _rules_stage(model, names, book)
    reasons = untrusted_cells(model, names, path, date1904=scan.date1904)
    by_formulas = {k for k, why in reasons.items() if why == BASE_REASON}
    lo_reasons = {k: why for k, why in reasons.items() if why != BASE_REASON}
    if lo_reasons:
        _libreoffice_stage(path, model, names, lo_reasons, book)
    if by_formulas:
        _formulas_stage(model, names, by_formulas, book)
    return book


RULES_ENGINE = "ironcalc+excel-rules"


def _rules_stage(model: Model, names: list[str], book: HybridResult) -> None:
    """Rewrite the formulas Excel reads differently from IronCalc (:mod:`.excel_rules`).

    The rewritten cells are still computed by IronCalc (recorded as
    ``ironcalc+excel-rules``, their original formula kept in ``book.formulas``),
    and the model is evaluated again so that the cells depending on them follow.
    """
    index = {name.casefold(): i for i, name in enumerate(names)}
    changed = 0
    for key in model.get_all_cells():
        sheet, row, column = key
        formula = model.get_cell_formula(sheet, row, column)
        if formula is None:
            continue

        def value_of(sheet_name: str | None, ref: str, own: int = sheet) -> object:
            target = own if sheet_name is None else index.get(sheet_name.casefold())
            match = _CELL_REF.match(ref)
            if target is None or match is None:
                return UNKNOWN
            r, c = int(match.group(2)), ironcalc.column_number_from_name(match.group(1))
            return model.get_cell_value(target, r, c)

        new = rewrite_formula(formula, value_of, names[sheet])
        if new is formula:
            continue
        try:
            model.set_user_input(sheet, row, column, new)
        except Exception as exc:  # IronCalc refuses to write into an array formula's range
            log.debug("excel rules: cannot rewrite %s (%s)", formula, exc)
            continue
        book.formulas.setdefault(key, formula)
        book.cell_engines[key] = RULES_ENGINE
        changed += 1
    if changed:
        model.evaluate()


def _libreoffice_stage(
    path: Path, model: Model, names: list[str], reasons: dict[str, str], book: HybridResult
) -> None:
    """Recompute ``reasons``' cells with LibreOffice and write its values into ``model``."""

    engine = libreoffice_or_none()
    if engine is None:
        return
    with tempfile.TemporaryDirectory(prefix="spreadrl-hybrid-") as tmp:
        out = Path(tmp) / "lo.xlsx"
        try:
            engine.recalculate(path, out)
            lo_model = load_model(out)
            lo_names = [props["name"] for props in lo_model.get_worksheets_properties()]
        except (SpreadrlError, BaseException) as exc:
            # LibreOffice dying (twice: it was retried) is no verdict on the workbook:
            # IronCalc's untrusted values must not stand in and score it
            if isinstance(exc, KeyboardInterrupt | SystemExit | EngineCrashed):
                raise
            log.warning("hybrid recalculation: LibreOffice failed on %s (%s)", path.name, exc)
            return
    lo_index = {name: i for i, name in enumerate(lo_names)}
    taken = 0
    for key, _reason in sorted(reasons.items()):
        sheet, row, column = key
        lo_sheet = lo_index.get(names[sheet])
        if lo_sheet is None:
            continue
        lo_value = lo_model.get_cell_value(lo_sheet, row, column)
        ours = model.get_cell_value(sheet, row, column)
        formula = model.get_cell_formula(sheet, row, column)
        if not _prefer_libreoffice(ours, lo_value, formula or ""):
            continue
        if not _write_back(model, key, lo_value):
            continue
        if formula is not None:
            book.formulas.setdefault(key, formula)
        book.cell_engines[key] = "libreoffice"
        taken += 1
    if taken:
        model.evaluate()


# Excel's calendar runs from 1900-01-00 to 9999-12-31 and its date functions return
# #NUM!/#VALUE! outside it (DATE: "year ... 10000 or greater ... #NUM!"; DATEVALUE:
# "outside the range ... #VALUE!"); LibreOffice's calendar goes on both ways.
_DATE_FUNCTIONS = re.compile(
    r"(?<![A-Z0-9_.])(?:DATE|DATEVALUE|YEAR|MONTH|DAY|EDATE|EOMONTH|WEEKDAY|WEEKNUM|"
    r"ISOWEEKNUM|DAYS|DAYS360|DATEDIF|NETWORKDAYS|NETWORKDAYS\.INTL|WORKDAY|WORKDAY\.INTL)\s*\("
)


def _prefer_libreoffice(ours: object, theirs: object, formula: str = "") -> bool:
    """Whether LibreOffice's value replaces IronCalc's on an untrusted cell.

    LibreOffice's own codes (``Err:NNN``) and its ``#NAME?`` (a function it lacks,
    e.g. XLOOKUP before LibreOffice 24.8) are never Excel's verdict: IronCalc's value
    stays. When both give an error, IronCalc's stays (two engines' different errors
    are no evidence either is Excel's; IronCalc's was the better guess on the
    development corpus), unless IronCalc's is one Excel never produces
    (``#N/IMPL!``, ``#ERROR!``, ``#CIRC!``) and LibreOffice's is an Excel error.
    IronCalc's error also stays against a LibreOffice value on a formula calling a
    date function: LibreOffice's calendar extends past Excel's (``DATE(10000,1,1)``,
    ``YEAR("7/5/1800")`` are errors in Excel and IronCalc, values in LibreOffice).
    Otherwise LibreOffice's value is taken.
    """
    if not _is_error(theirs):
        if _is_error(ours) and ours in EXCEL_ERRORS:
            code = _STRING.sub('""', formula.upper())
            return not _DATE_FUNCTIONS.search(code)
        return True
    if str(theirs).startswith("Err:") or theirs == "#NAME?":
        return False
    if _is_error(ours):
        return ours not in EXCEL_ERRORS and theirs in EXCEL_ERRORS
    return True


_formulas_cache: dict[str, Any] = {}


def _formulas_value(value: object) -> str | float | bool | None:
    """A value of the ``formulas`` package as the checker's plain types (str, float, bool)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        value = value.ravel()[0] if value.size else None
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer | np.floating | int | float):
        return float(value)
    return None if value is None else str(value)


def _formulas_stage(
    model: Model, names: list[str], keys: set[tuple[int, int, int]], book: HybridResult
) -> None:
    """Recompute the base-conversion cells with the ``formulas`` package, cell by cell.

    Its BIN2*/OCT2*/HEX2* follow Excel's argument rules (``#NUM!`` for an
    invalid number, ``#VALUE!`` for bad places), where IronCalc and LibreOffice
    both differ. Only formulas whose inputs are single cells of the same sheet
    are handled; the others keep IronCalc's value. Skipped, with one warning,
    where ``formulas`` is not installed (``pip install 'spreadrl[recalc]'``).
    """
    try:
        import formulas
        import schedula
    except ImportError:
        _warn_once(
            "hybrid recalculation: the 'formulas' package is not installed, so base-conversion "
            "functions (BIN2DEC, DEC2BIN, ...) keep IronCalc's values; pip install 'spreadrl[recalc]'"
        )
        return
    taken = 0
    for key in sorted(keys):
        sheet, row, column = key
        formula = model.get_cell_formula(sheet, row, column)
        if formula is None:
            continue
        try:
            function = _formulas_cache.get(formula)
            if function is None:
                function = formulas.Parser().ast(formula)[1].compile()
                if len(_formulas_cache) < 4096:
                    _formulas_cache[formula] = function
            args = []
            for name in function.inputs:
                match = _CELL_REF.match(str(name).upper())
                if match is None:
                    raise ValueError(f"input {name} is not a cell of this sheet")
                r, c = int(match.group(2)), ironcalc.column_number_from_name(match.group(1))
                value = model.get_cell_value(sheet, r, c)
                if _is_error(value):
                    # formulas would read "#N/A" as text (and answer #NUM!); Excel passes
                    # the error on, as IronCalc does: keep IronCalc's value
                    raise ValueError(f"input {name} holds the error {value}")
                args.append(schedula.EMPTY if value is None or value == "" else value)
            value = _formulas_value(function(*args))
        except Exception as exc:  # formulas raises many types on what it cannot compile
            log.debug("formulas cannot evaluate %s: %s", formula, exc)
            continue
        if value is None:
            continue
        if not _write_back(model, key, value):
            continue
        book.formulas.setdefault(key, formula)
        book.cell_engines[key] = "formulas"
        taken += 1
    if taken:
        model.evaluate()


class HybridEngine:
    """The :class:`RecalcEngine` face of :func:`load_hybrid` (IronCalc + LibreOffice)."""

    name = "hybrid"

    def recalculate(self, src: Path, dst: Path | None = None) -> None:
        src = Path(src)
        save_model(load_hybrid(src).model, Path(dst) if dst is not None else src)

    def evaluate(self, path: Path) -> dict[str, dict[str, object]]:
        return _dump(load_hybrid(Path(path)).model)

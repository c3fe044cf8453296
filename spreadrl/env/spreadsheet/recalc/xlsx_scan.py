"""One cheap pass over an .xlsx archive: what the checker must know before trusting a reader.

No workbook parse, only regular expressions over the XML parts, because this runs
for every checked workbook (answer and output). It finds:

* whether some formula cell lacks a cached value (then the workbook is recalculated);
* the cells that carry a type but no value. openpyxl saves a blank cell that has a
  font, fill or number format as ``<c r="D2" s="1" t="n"/>``; Excel writes such a
  cell without ``t`` and every reader takes it as empty, but IronCalc reads the
  typed form as the number 0 (``t="b"`` as FALSE, ``t="s"`` as ""), so a formatted
  blank would match an answer of 0 and ``ISBLANK`` would say FALSE. Those cells are
  cleared (style kept) in the model right after loading (:func:`clear_typed_blanks`);
* the workbook's date system (``<workbookPr date1904="1"/>``).
"""

from __future__ import annotations

import html
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import ironcalc
from ironcalc import Model

from spreadrl.archive_gate import check_archive
from spreadrl.errors import WorkbookError

_NS = rb"(?:\w+:)?"
# A formula cell whose <v> is absent or empty: openpyxl writes `<f>..</f><v />`.
_UNCACHED_FORMULA = re.compile(
    rb"<" + _NS + rb"c\b([^>]*)>\s*<" + _NS + rb"f\b[^>]*?(?:/>|>[^<]*</" + _NS + rb"f>)\s*"
    rb"(<" + _NS + rb"v\s*/>|<" + _NS + rb"v>\s*</" + _NS + rb"v>)?\s*</" + _NS + rb"c>"
)
_STR_TYPE = re.compile(rb"""\bt\s*=\s*["']str["']""")
# A cell with no formula, no inline string and no (or an empty) value: self-closing,
# or holding nothing but an empty <v>.
_VALUELESS = re.compile(
    rb"<"
    + _NS
    + rb"c\b([^>]*?)(?:/>|>\s*(?:<"
    + _NS
    + rb"v\s*/>|<"
    + _NS
    + rb"v>\s*</"
    + _NS
    + rb"v>)?\s*</"
    + _NS
    + rb"c>)"
)
_VALUELESS_PLAIN = re.compile(rb"<c ([^>]*?)(?:/>|>\s*(?:<v\s*/>|<v>\s*</v>)?\s*</c>)")
_TYPE_ATTR = re.compile(rb"""\bt\s*=\s*["']""")
_REF_ATTR = re.compile(rb"""\br\s*=\s*["']\$?([A-Z]{1,3})\$?(\d+)["']""")
_DATE1904 = re.compile(r"""<(?:\w+:)?workbookPr\b[^>]*\bdate1904\s*=\s*["'](1|true)["']""")


@dataclass
class XlsxScan:
    """What one pass over the archive found (see the module docstring)."""

    # (name, zip part); read only when some sheet holds typed blanks
    sheet_parts: list[tuple[str, str]] = field(default_factory=list)
    date1904: bool = False
    uncached_formulas: bool = False
    # sheet name -> [(row, column)]
    typed_blanks: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


def _column_number(letters: bytes) -> int:
    number = 0
    for char in letters:
        number = number * 26 + (char - 64)
    return number


def sheet_parts(archive: zipfile.ZipFile) -> list[tuple[str, str]]:
    """(sheet name, zip part) of every worksheet, in the workbook's order."""
    try:
        workbook = archive.read("xl/workbook.xml").decode("utf-8", "replace")
        rels = archive.read("xl/_rels/workbook.xml.rels").decode("utf-8", "replace")
    except KeyError:
        return []
    targets = {}
    for rel in re.finditer(r"<(?:\w+:)?Relationship\b[^>]*>", rels):
        rid = re.search(r'\bId="([^"]+)"', rel.group(0))
        target = re.search(r'\bTarget="([^"]+)"', rel.group(0))
        if rid and target:
            part = target.group(1)
            part = part.lstrip("/") if part.startswith("/") else "xl/" + part
            targets[rid.group(1)] = part
    parts = []
    for sheet in re.finditer(r"<(?:\w+:)?sheet\b[^>]*>", workbook):
        name = re.search(r'\bname="([^"]*)"', sheet.group(0))
        rid = re.search(r'\br:id="([^"]+)"', sheet.group(0)) or re.search(
            r'\b\w+:id="([^"]+)"', sheet.group(0)
        )
        if name and rid and rid.group(1) in targets:
            parts.append((html.unescape(name.group(1)), targets[rid.group(1)]))
    return parts


def typed_blank_cells(data: bytes) -> list[tuple[int, int]]:
    """(row, column) of every cell of one sheet's XML that has a type but no value."""
    cells = []
    # the plain `<c ` form has a literal prefix the regex engine finds fast; prefixed
    # cells (`<x:c `) need the general pattern
    pattern = _VALUELESS if b":c " in data else _VALUELESS_PLAIN
    for match in pattern.finditer(data):
        attrs = match.group(1)
        if not _TYPE_ATTR.search(attrs):
            continue  # untyped and valueless: every reader already sees it empty
        ref = _REF_ATTR.search(attrs)
        if ref is not None:
            cells.append((int(ref.group(2)), _column_number(ref.group(1))))
    return cells


def scan_xlsx(path: Path) -> XlsxScan:
    """Scan ``path`` once; raises WorkbookError naming the file when it is no xlsx archive.

    About 0.3 ms for a small gym output (the zip's central directory and sheet parts);
    sheet names are read only when some sheet holds typed blanks.
    """
    check_archive(path)  # before any member is inflated
    scan = XlsxScan()
    blanks_by_part: dict[str, list[tuple[int, int]]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if "xl/workbook.xml" in names:
                workbook = archive.read("xl/workbook.xml").decode("utf-8", "replace")
                scan.date1904 = bool(_DATE1904.search(workbook))
            for name in names:
                if not (name.startswith("xl/worksheets/") and name.endswith(".xml")):
                    continue
                data = archive.read(name)
                if not scan.uncached_formulas and (b"<f" in data or b":f" in data):
                    for match in _UNCACHED_FORMULA.finditer(data):
                        if match.group(2) is None or not _STR_TYPE.search(match.group(1)):
                            scan.uncached_formulas = True
                            break
                if b" t=" in data:
                    blanks = typed_blank_cells(data)
                    if blanks:
                        blanks_by_part[name] = blanks
            if blanks_by_part:
                scan.sheet_parts = sheet_parts(archive)
                for sheet, part in scan.sheet_parts:
                    if part in blanks_by_part:
                        scan.typed_blanks[sheet] = blanks_by_part[part]
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise WorkbookError(f"{path}: not a readable .xlsx file ({exc})") from exc
    return scan


def clear_typed_blanks(model: Model, scan: XlsxScan) -> int:
    """Empty (style kept) the cells IronCalc read as a value although the file holds none.

    Call it right after loading, before ``evaluate``, so formulas see them blank too.
    Returns how many cells were cleared.
    """
    if not scan.typed_blanks:
        return 0
    index = {props["name"]: i for i, props in enumerate(model.get_worksheets_properties())}
    cleared = 0
    for name, cells in scan.typed_blanks.items():
        sheet = index.get(name)
        if sheet is None:
            continue
        for row, column in cells:
            try:
                if model.get_cell_formula(sheet, row, column) is None:
                    model.clear_cell_contents(sheet, row, column)
                    cleared += 1
            except Exception:  # IronCalc refuses (a cell inside an array formula's range)
                continue
    return cleared


def load_model(path: Path, scan: XlsxScan | None = None, locale: str = "en") -> Model:
    """IronCalc's model of ``path`` with typed blanks cleared (not evaluated).

    ``locale`` is IronCalc's name of the locale TEXT renders in (it also sets how
    formulas typed into the model parse: keep ``en`` where formulas are rewritten).
    Raises WorkbookError naming the file; an IronCalc panic (a BaseException) too.
    """
    scan = scan_xlsx(path) if scan is None else scan
    try:
        model = ironcalc.load_from_xlsx(str(path), locale)
    except BaseException as exc:  # a Rust panic arrives as pyo3 PanicException (BaseException)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise WorkbookError(f"{path}: cannot read workbook ({exc})") from exc
    clear_typed_blanks(model, scan)
    return model

"""Read a workbook's computed cell values, typed the way openpyxl types them.

SpreadsheetBench's checker reads cells with ``openpyxl.load_workbook(data_only=True)``,
so its comparison rules are written against openpyxl's value types: a number in
a date-formatted cell is a ``datetime`` (or a ``time`` below 1, a ``timedelta``
under ``[h]:mm``), an error cell is its text (``"#N/A"``), an empty cell is None.
This module reproduces those types from IronCalc's model, which loads a 10k-cell
file as fast as python-calamine (about 7 ms) but, unlike calamine, keeps error
values and leading spaces; and it can compute formulas in the same model.

Both the cached and the recalculated path go through :func:`cell_value`, so a
date written by openpyxl and a date computed by ``=DATE(2024,1,5)`` normalise
identically.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ironcalc import Model
from openpyxl.styles.numbers import is_date_format, is_timedelta_format
from openpyxl.utils.datetime import CALENDAR_MAC_1904, WINDOWS_EPOCH, from_excel

from spreadrl.env.limits import EnvLimitExceeded
from spreadrl.env.spreadsheet.recalc import get_engine
from spreadrl.env.spreadsheet.recalc.excel_text import fix_number_text, needs_fix
from spreadrl.env.spreadsheet.recalc.hybrid import load_hybrid
from spreadrl.env.spreadsheet.recalc.ironcalc_engine import ironcalc_locale_now
from spreadrl.env.spreadsheet.recalc.xlsx_scan import load_model, scan_xlsx
from spreadrl.errors import WorkbookError


def has_uncached_formulas(path: Path) -> bool:
    """True when some formula cell of ``path`` carries no cached value.

    A cheap scan of the sheet XML (no workbook parse, :func:`.xlsx_scan.scan_xlsx`).
    A ``t="str"`` cell with an empty ``<v>`` is a formula whose cached result is the
    empty string, so it does not count.
    """
    return scan_xlsx(Path(path)).uncached_formulas


# Characters XML 1.0 cannot hold (and CR, which XML turns into LF): Excel stores them as ``_xHHHH_`` escapes (ECMA-376
# ST_Xstring). IronCalc decodes the escapes of shared strings, not of inline strings;
# openpyxl (SpreadsheetBench's reader) decodes none but ``_x005F_`` and re-saves a string
# as it read it, so the same cell would read two ways. Read as openpyxl does.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b-\x1f]")


def _escape_control(text: str) -> str:
    return _XML_ILLEGAL.sub(lambda m: f"_x{ord(m.group(0)):04X}_", text)


@lru_cache(maxsize=512)
def _date_kind(num_fmt: str) -> str | None:
    """'date', 'timedelta' or None for a number format, by openpyxl's own tests."""
    if not num_fmt or num_fmt.lower() == "general":
        return None
    if not is_date_format(num_fmt):
        return None
    return "timedelta" if is_timedelta_format(num_fmt) else "date"


def cell_value(
    model: Model, sheet: int, row: int, column: int, *, date1904: bool = False
) -> object:
    """The value openpyxl (``data_only=True``) would report for one cell of an IronCalc model.

    ``date1904``: the workbook counts days from 1904-01-01 (``<workbookPr date1904="1"/>``,
    old Mac Excel), so serial 0 is 1904-01-01, as openpyxl reads it.
    """
    value = model.get_cell_value(sheet, row, column)
    if isinstance(value, float):
        kind = _date_kind(model.get_cell_style(sheet, row, column).get("num_fmt") or "")
        if kind is not None:
            epoch = CALENDAR_MAC_1904 if date1904 else WINDOWS_EPOCH
            try:
                return from_excel(value, epoch, timedelta=kind == "timedelta")
            except (OverflowError, ValueError):
                return value
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    elif isinstance(value, str) and not value.isprintable() and _XML_ILLEGAL.search(value):
        return _escape_control(value)
    return value


@dataclass
class WorkbookValues:
    """A loaded workbook: its sheet names in order and typed access to its cells.

    ``recalculated`` says whether formulas were computed by ``engine`` (because
    some had no cached value); :meth:`formula` then tells a computed cell (whose
    ``#NAME?`` is an engine failure) from a stored one.
    """

    path: Path
    model: Model
    sheet_names: list[str]
    recalculated: bool = False
    engine: str | None = None
    date1904: bool = False
    cell_engines: dict[tuple[int, int, int], str] = field(default_factory=dict)
    formulas: dict[tuple[int, int, int], str] = field(default_factory=dict)
    _index: dict[str, int] = field(default_factory=dict)
    _max_rows: dict[int, int] = field(default_factory=dict)
    _used_sheets: set[int] | None = None

    def __post_init__(self) -> None:
        self._index = {name: i for i, name in enumerate(self.sheet_names)}

    def find_sheet(self, name: str) -> str | None:
        """The workbook's spelling of sheet ``name`` (exact, else case-insensitive), or None."""
        if name in self._index:
            return name
        folded = name.strip().casefold()
        for candidate in self.sheet_names:
            if candidate.strip().casefold() == folded:
                return candidate
        return None

    def value(self, sheet: str, row: int, column: int) -> object:
        index = self._index[sheet]
        value = cell_value(self.model, index, row, column, date1904=self.date1904)
        if (
            isinstance(value, str)
            and self.recalculated
            and len(value) > 9
            and self.cell_engine(sheet, row, column).startswith("ironcalc")
            and needs_fix(value)
        ):
            formula = self.formula(sheet, row, column)
            if formula is not None:  # text IronCalc built from numbers: Excel's 15 digits
                value = fix_number_text(value, formula)
        return value

    def formula(self, sheet: str, row: int, column: int) -> str | None:
        key = (self._index[sheet], row, column)
        if key in self.formulas:  # a formula whose value a second engine supplied
            return self.formulas[key]
        return self.model.get_cell_formula(*key)

    def cell_engine(self, sheet: str, row: int, column: int) -> str:
        """Which engine produced this cell's value: an engine name, or "cached" (as stored)."""
        key = (self._index[sheet], row, column)
        if key in self.cell_engines:
            return self.cell_engines[key]
        return self.engine if self.recalculated and self.engine else "cached"

    def max_row(self, sheet: str) -> int:
        """The last used row of ``sheet`` (0 when the sheet is empty).

        Computed once per sheet: a column-only range of answer_position must not
        re-scan the workbook for every range (1,000 ranges of a big sheet took 18 s).
        """
        index = self._index[sheet]
        if index not in self._max_rows:
            if self._used_sheets is None:
                self._used_sheets = {s for s, _, _ in self.model.get_all_cells()}
            used = index in self._used_sheets
            self._max_rows[index] = int(self.model.get_sheet_dimensions(index)[1]) if used else 0
        return self._max_rows[index]


def load_values(
    path: Path, *, engine: str = "ironcalc", recalc: bool | None = None
) -> WorkbookValues:
    """Load ``path`` for checking, recalculating only when some formula lacks a cached value.

    ``recalc`` forces (True) or forbids (False) recalculation; None decides by
    :func:`has_uncached_formulas`. Raises WorkbookError naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise WorkbookError(f"{path}: file does not exist")
    scan = scan_xlsx(path)
    needs = scan.uncached_formulas if recalc is None else recalc
    if needs and engine == "hybrid":
        result = load_hybrid(path, scan)
        return WorkbookValues(
            path=path,
            model=result.model,
            sheet_names=result.sheet_names,
            recalculated=True,
            engine="ironcalc",
            date1904=scan.date1904,
            cell_engines=result.cell_engines,
            formulas=result.formulas,
        )
    source = path
    tmpdir = None
    if needs and engine != "ironcalc":
        tmpdir = tempfile.TemporaryDirectory(prefix="spreadrl-recalc-")
        source = Path(tmpdir.name) / path.name
        get_engine(engine).recalculate(path, source)
    locale = ironcalc_locale_now() if needs and engine == "ironcalc" else "en"
    try:
        model = load_model(source, scan if source == path else None, locale)
        if needs and engine == "ironcalc":
            model.evaluate()
        names = [props["name"] for props in model.get_worksheets_properties()]
    except WorkbookError as exc:
        if source == path:
            raise
        raise WorkbookError(f"{path}: cannot read the recalculated workbook ({exc})") from exc
    except BaseException as exc:  # IronCalc panics surface as BaseException
        if isinstance(exc, KeyboardInterrupt | SystemExit | MemoryError | EnvLimitExceeded):
            raise  # a worker's limit (spreadrl.env.limits): the episode ends on it
        raise WorkbookError(f"{path}: cannot read workbook ({exc})") from exc
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()
    return WorkbookValues(
        path=path,
        model=model,
        sheet_names=names,
        recalculated=needs,
        engine=engine if needs else None,
        date1904=scan.date1904,
    )

"""Formula recalculation: turn formula cells into computed values without Excel.

An agent that writes formulas with openpyxl leaves no cached values, and
SpreadsheetBench's checker reads cached values only, so a formula answer would
score as empty. Before checking, such workbooks are recalculated by an engine.

Two engines implement :class:`RecalcEngine`:

* ``ironcalc`` (default, pip ``ironcalc``): in-process, 0.26 s for 10,000
  formulas and 54/54 on the project's fidelity probe.
* ``libreoffice``: headless ``soffice`` (only when it is on PATH); one
  persistent process over UNO where python3-uno is installed (about 0.1 s per
  small workbook once started), else one process per call (0.75 s or more).
* ``hybrid``: IronCalc first, LibreOffice for the cells IronCalc is known not
  to reproduce Excel on (:mod:`spreadrl.env.spreadsheet.recalc.hybrid`); IronCalc alone,
  with one warning, where LibreOffice is missing.

``evaluate`` returns raw computed values: numbers as float, text as str, logical
values as bool, and error values as their Excel text (``"#DIV/0!"``, ``"#N/A"``,
``"#NAME?"`` for a function the engine does not know, ``"#N/IMPL!"`` for one
IronCalc knows but has not implemented). Dates stay serial numbers there; use
:mod:`spreadrl.env.spreadsheet.recalc.values` for openpyxl-typed values.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol, runtime_checkable

from spreadrl.errors import SpreadrlError

ENGINES = ("ironcalc", "libreoffice", "hybrid")


@runtime_checkable
class RecalcEngine(Protocol):
    """A formula engine: recalculates a workbook file or returns its computed values."""

    name: str

    def recalculate(self, src: Path, dst: Path | None = None) -> None:
        """Write a copy of ``src`` whose formula cells carry computed cached values.

        ``dst`` defaults to ``src``, replaced atomically (never half-written).
        """
        ...

    def evaluate(self, path: Path) -> dict[str, dict[str, object]]:
        """Sheet name -> {"A1": value} for every non-empty cell, formulas computed."""
        ...


def available_engines() -> list[str]:
    """Engines usable on this machine (``ironcalc`` and ``hybrid`` always; ``libreoffice``
    if soffice is on PATH)."""
    names = ["ironcalc", "hybrid"]
    if find_soffice() is not None:
        names.append("libreoffice")
    return names


def find_soffice() -> str | None:
    """The path of LibreOffice's ``soffice`` (or ``libreoffice``) binary, or None."""
    return shutil.which("soffice") or shutil.which("libreoffice")


def get_engine(name: str = "ironcalc") -> RecalcEngine:
    """The engine called ``name``; raises SpreadrlError naming the available ones."""
    key = name.strip().lower()
    if key == "ironcalc":
        from spreadrl.env.spreadsheet.recalc.ironcalc_engine import IronCalcEngine

        return IronCalcEngine()
    if key == "hybrid":
        from spreadrl.env.spreadsheet.recalc.hybrid import HybridEngine

        return HybridEngine()
    if key in ("libreoffice", "soffice"):
        from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine

        return LibreOfficeEngine()
    raise SpreadrlError(
        f"unknown recalculation engine {name!r}; available here: {', '.join(available_engines())} "
        f"(known: {', '.join(ENGINES)})"
    )


__all__ = ["ENGINES", "RecalcEngine", "available_engines", "find_soffice", "get_engine"]

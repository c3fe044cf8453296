"""``--scoring spreadsheetbench``: the verdict SpreadsheetBench's own evaluator gives.

spreadrl's default reward (:mod:`spreadrl.env.spreadsheet.checker`, "hybrid") recalculates
both workbooks with an engine close to Excel and compares with SpreadsheetBench's
value rules made consistent. This module instead reproduces the leaderboard's
path, quirks included, so a pass@1 here is the number the benchmark would give:

1. the output is converted by headless LibreOffice exactly as
   ``evaluation/open_spreadsheet.py`` does
   (:mod:`spreadrl.env.spreadsheet.recalc.sbench_convert`); the answer is read as it is,
   with the values Excel cached in it;
2. both are read with openpyxl, ``data_only=True``;
3. ``answer_position`` is read the way Harbor's hardened SpreadsheetBench
   evaluator reads it (commas inside a quoted sheet name, a space or a
   non-breaking space after a comma, ``A:G`` bounded by the larger used row count
   of the two sheets, ``BD2:308`` read as ``BD2:BD308``); a range that covers no
   cell fails instead of passing vacuously;
4. each cell is compared by SpreadsheetBench's ``transform_value`` and
   ``compare_cell_value``: numbers (and numeric text) rounded to 2 places, a
   datetime to whole days, and a time to ``str(t)[:-3]``, so ``11:53:19.250000``
   becomes ``"11:53:19.250"`` and ``11:53:19`` becomes ``"11:53"``: a time with
   microseconds never equals one without (the hybrid compares both as ``HH:MM``).

Anything that makes upstream's evaluator raise (an unknown sheet in the answer, a
range openpyxl cannot read) is a failed case there, and is here. See
docs/checker.md, "Two scorings".
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spreadrl.archive_gate import check_archive
from spreadrl.env.spreadsheet.value_compare import sbench_transform, transformed_values_match
from spreadrl.env.types import Mismatch

SCORINGS = ("hybrid", "spreadsheetbench")


def sbench_values_match(expected: object, actual: object) -> bool:
    """SpreadsheetBench's ``compare_cell_value``: None and "" are one empty, then types, then ==."""
    return transformed_values_match(sbench_transform(expected), sbench_transform(actual))


def split_position(text: str) -> list[str]:
    """Split on commas, except inside a sheet name whose quote opens a piece.

    Only a quote at the start of a piece (after spaces) opens a quoted name, so a
    dangling one (``Sheet3'!A:G``) does not swallow the rest; a comma outside quotes
    ends the piece, and each piece is stripped of whitespace (a non-breaking space
    included).
    """
    pieces: list[str] = []
    current: list[str] = []
    quoted = False
    at_start = True
    for char in text:
        if char == "'" and (quoted or at_start):
            quoted = not quoted
            at_start = False
        elif char == "," and not quoted:
            pieces.append("".join(current).strip())
            current, at_start = [], True
            continue
        elif char != " ":
            at_start = False
        current.append(char)
    if current:
        pieces.append("".join(current).strip())
    return pieces


def position_parts(text: str, first_sheet: str) -> list[tuple[str, str]]:
    """(sheet, range) per piece: the sheet before the first ``!``, else the first sheet."""
    parts = []
    for piece in split_position(text):
        piece = piece.strip("'")
        if "!" in piece:
            sheet, cell_range = piece.split("!", 1)
            sheet = sheet.strip("'")
        else:
            sheet, cell_range = first_sheet, piece
        parts.append((sheet, cell_range.strip("'")))
    return parts


def _column_number(letters: str) -> int:
    number = 0
    for char in letters:
        number = number * 26 + (ord(char) - ord("A") + 1)
    return number


def _column_letters(number: int) -> str:
    letters = ""
    while number > 0:
        number, rest = divmod(number - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def _split_cell(text: str) -> tuple[str, int | None]:
    letters = "".join(c for c in text if not c.isdigit())
    digits = "".join(c for c in text if c.isdigit())
    return letters, int(digits) if digits else None


def cell_names(cell_range: str, max_row: int) -> list[str]:
    """The cells of a range, column by column; open rows run 1..``max_row``.

    ``BD2:308`` (no end column) takes the start column; ``A:G`` takes rows
    1..``max_row``. A range without ``:`` is the one cell, passed on as written.
    """
    if ":" not in cell_range:
        return [cell_range]
    start, end = cell_range.split(":")  # a second ':' raises, as upstream's unpacking does
    (c1, r1), (c2, r2) = _split_cell(start), _split_cell(end)
    c2 = c2 or c1
    c1 = c1 or c2
    first = _column_number(c1) if c1 else 1
    last = _column_number(c2) if c2 else 1
    rows = range(r1 or 1, (r2 or max_row or 1000) + 1)
    return [f"{_column_letters(c)}{r}" for c in range(first, last + 1) for r in rows]


def _compare_part(
    gt_book: Any, out_book: Any, sheet: str, cell_range: str
) -> tuple[list[Mismatch], int]:
    if sheet not in out_book.sheetnames:
        missing = Mismatch(sheet, cell_range, None, None, f"sheet {sheet!r} missing from output")
        return [missing], 0
    gt_sheet, out_sheet = gt_book[sheet], out_book[sheet]
    max_row = max(gt_sheet.max_row or 1, out_sheet.max_row or 1)
    names = cell_names(cell_range, max_row)
    found: list[Mismatch] = []
    for name in names:
        expected, actual = gt_sheet[name].value, out_sheet[name].value
        if not sbench_values_match(expected, actual):
            a, b = sbench_transform(expected), sbench_transform(actual)
            why = f"differs after SpreadsheetBench's transform ({a!r} vs {b!r})"
            found.append(Mismatch(sheet, name, expected, actual, why))
    if not names:
        found.append(Mismatch(sheet, cell_range, None, None, "range covers no cell"))
    return found, len(names)


def compare_books(answer: Path, output: Path, answer_position: str) -> tuple[list[Mismatch], int]:
    """Every mismatching cell and the number of cells compared; reads both with openpyxl.

    A failure upstream's evaluator turns into a failed case (an unreadable file, a
    sheet missing from the answer, a range openpyxl cannot read) is one mismatch
    saying why.
    """
    import openpyxl

    try:
        check_archive(answer)
        check_archive(output)
        gt_book = openpyxl.load_workbook(answer, data_only=True)
        out_book = openpyxl.load_workbook(output, data_only=True)
    except Exception as exc:  # noqa: BLE001 - upstream: any load error fails the case
        return [Mismatch("", "", None, None, f"unreadable workbook: {exc}")], 0
    mismatches: list[Mismatch] = []
    checked = 0
    try:
        for sheet, cell_range in position_parts(answer_position, gt_book.sheetnames[0]):
            found, count = _compare_part(gt_book, out_book, sheet, cell_range)
            mismatches.extend(found)
            checked += count
    except Exception as exc:  # noqa: BLE001 - upstream: an exception fails the case
        reason = f"SpreadsheetBench's evaluator fails here: {type(exc).__name__}: {exc}"
        mismatches.append(Mismatch("", answer_position, None, None, reason))
    return mismatches, checked


def convert_copies(outputs: Sequence[Path], folder: Path) -> tuple[list[Path], dict[Path, str]]:
    """Copy ``outputs`` into ``folder`` and convert the copies as open_spreadsheet.py does.

    Returns the copies (a missing output maps to a path that does not exist) and
    copy -> why LibreOffice left it as it was. The agent's own files are never changed.
    """
    from spreadrl.env.spreadsheet.recalc.sbench_convert import convert_outputs

    copies = []
    for index, output in enumerate(outputs):
        copy = folder / f"{index}" / Path(output).name
        if Path(output).is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(output, copy)
        copies.append(copy)
    failures = convert_outputs([c for c in copies if c.is_file()])
    return copies, failures


def _refusals(outputs: Sequence[Path]) -> dict[int, str]:
    """Index -> why the archive gate refuses that output (LibreOffice inflates what it gets)."""
    from spreadrl.archive_gate import WorkbookRefused, check_archive

    refused = {}
    for index, output in enumerate(outputs):
        try:
            if Path(output).is_file():
                check_archive(Path(output))
        except WorkbookRefused as exc:
            refused[index] = str(exc)
    return refused


def sbench_check(
    outputs: Sequence[Path], answers: Sequence[Path], answer_position: Sequence[str]
) -> list[tuple[list[Mismatch], int, list[str], str]]:
    """Score many (output, answer, position) triples, converting all outputs in one batch.

    Each result: mismatches, cells compared, notes, and why the archive gate refused
    the output ("" when it did not; a refused output is never converted).
    """
    refused = _refusals(outputs)
    kept = [o for i, o in enumerate(outputs) if i not in refused]
    with tempfile.TemporaryDirectory(prefix="spreadrl-sbench-") as tmp:
        converted, failures = convert_copies(kept, Path(tmp))
        copies = iter(converted)
        results: list[tuple[list[Mismatch], int, list[str], str]] = []
        for index, (answer, position) in enumerate(zip(answers, answer_position, strict=True)):
            if index in refused:
                why = refused[index]
                results.append(([Mismatch("", "", None, None, why)], 0, [], why))
                continue
            copy = next(copies)
            notes = (
                [f"LibreOffice left it unconverted: {failures[copy]}"] if copy in failures else []
            )
            if not copy.is_file():
                missing = Mismatch("", "", None, None, "output file does not exist")
                results.append(([missing], 0, notes, ""))
                continue
            mismatches, checked = compare_books(Path(answer), copy, position)
            results.append((mismatches, checked, notes, ""))
    return results

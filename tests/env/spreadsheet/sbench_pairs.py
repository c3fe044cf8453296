"""Seeded (answer, output) workbook pairs for checking ``--scoring spreadsheetbench``.

The same seed gives the same pairs on every machine: ``scripts/sbench_parity.py``
scored them with SpreadsheetBench's own ``evaluation.py`` (after its
``open_spreadsheet.py`` LibreOffice conversion) and with Harbor's hardened
evaluator, from copies of their repositories outside this one, and recorded the
verdicts in ``tests/fixtures/sbench_verdicts.json``; the tests regenerate the pairs
and score them with spreadrl's implementation.

Answers hold plain values (what Excel's cache gives the evaluator); outputs hold
the same values, near misses (a time without its milliseconds, a number 0.004 or
0.006 away, numeric text, "" for an empty cell, a date shifted by hours) or
formulas that LibreOffice computes during the conversion.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from pathlib import Path

SHEET = "Sheet1"
OTHER = "Q1, 2024"
"""A second sheet whose name holds a comma and a space (Harbor's quoted-comma case)."""

UPSTREAM_FORMS = ("A1:B3", "Sheet1!A1:B3", "'Sheet1'!A1:B3", "A1", "A1:A3,B1:B3", "B2:B3")
HARBOR_FORMS = (
    "A:B",
    f"'{OTHER}'!A1:B2",
    "A1:A3, B1:B3",
    "A1:A3,\u00a0B1:B3",
    "B1:3",
    f"'{OTHER}'!A1:B2,Sheet1!A1",
)


@dataclass(frozen=True)
class Pair:
    index: int
    answer: Path
    output: Path
    answer_position: str


def _answer_value(rng: random.Random) -> object:
    kind = rng.choice(
        ["int", "float", "numtext", "text", "none", "bool", "date", "datetime", "time", "time_us"]
    )
    if kind == "int":
        return rng.randint(-500, 5000)
    if kind == "float":
        return round(rng.uniform(-100, 100), rng.choice([2, 3, 4]))
    if kind == "numtext":
        return f"{rng.uniform(0, 99):.{rng.choice([1, 2, 3])}f}"
    if kind == "text":
        return rng.choice(["Jun", "total", "a, b", "N/A", "11:53", "yes"])
    if kind == "none":
        return None
    if kind == "bool":
        return rng.choice([True, False])
    if kind in ("date", "datetime"):
        day = dt.datetime(1990, 1, 1) + dt.timedelta(days=rng.randint(0, 15000))
        if kind == "datetime":
            day += dt.timedelta(hours=rng.randint(0, 23), minutes=rng.randint(0, 59))
        return day
    micro = rng.choice([250000, 500000, 125000]) if kind == "time_us" else 0
    return dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), micro)


def _formula(value: object) -> tuple[object, str | None]:
    """A formula LibreOffice evaluates to ``value`` (and the number format it needs)."""
    if isinstance(value, bool):
        return ("=TRUE()" if value else "=FALSE()"), None
    if isinstance(value, int | float):
        return f"={value!r}*1", None
    if isinstance(value, dt.datetime):
        clock = f"+TIME({value.hour},{value.minute},0)" if value.hour or value.minute else ""
        return f"=DATE({value.year},{value.month},{value.day}){clock}", "yyyy-mm-dd hh:mm"
    if isinstance(value, dt.time):
        millis = value.microsecond // 1000
        extra = f"+{millis}/86400000" if millis else ""
        return f"=TIME({value.hour},{value.minute},{value.second}){extra}", "hh:mm:ss.000"
    if value is None:
        return '=""', None
    return '="' + str(value).replace('"', '""') + '"', None


def _near(value: object, rng: random.Random) -> object:
    """A value that one rule set or the other may still count as equal."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return rng.choice([value + 0.004, value - 0.006, str(value), f"{value:.2f}"])
    if isinstance(value, dt.datetime):
        return value + dt.timedelta(hours=rng.choice([5, 13]))
    if isinstance(value, dt.time):
        if value.microsecond:
            return value.replace(microsecond=0)
        return value.replace(second=(value.second + 1) % 60)
    if value is None:
        return ""
    if isinstance(value, str):
        return rng.choice([value.upper(), value + " ", value])
    return value


def _output_cell(value: object, rng: random.Random) -> tuple[object, str | None]:
    mode = rng.choices(["same", "formula", "near", "other"], weights=[4, 4, 4, 1])[0]
    if mode == "same":
        return value, None
    if mode == "formula":
        return _formula(value)
    if mode == "near":
        return _near(value, rng), None
    return "wrong", None


def _write(path: Path, cells: dict[tuple[str, str], tuple[object, str | None]]) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    book.active.title = SHEET
    book.create_sheet(OTHER)
    for (sheet, ref), (value, number_format) in cells.items():
        cell = book[sheet][ref]
        cell.value = value
        if number_format:
            cell.number_format = number_format
        elif isinstance(value, dt.time):
            cell.number_format = "hh:mm:ss.000" if value.microsecond else "hh:mm:ss"
    book.save(path)


def make_pair(seed: int, index: int, folder: Path, forms: tuple[str, ...]) -> Pair:
    """Pair ``index`` of ``seed``: the same files for the same arguments, anywhere."""
    rng = random.Random(f"{seed}/{index}")
    refs = [(sheet, f"{c}{r}") for sheet in (SHEET, OTHER) for c in "AB" for r in (1, 2, 3)]
    answer_cells, output_cells = {}, {}
    for key in refs:
        value = _answer_value(rng)
        answer_cells[key] = (value, None)
        output_cells[key] = _output_cell(value, rng) if rng.random() < 0.2 else (value, None)
    if rng.random() < 0.15:  # a stray value below the answer: only open ranges see it
        output_cells[(SHEET, "A5")] = ("extra", None)
    folder.mkdir(parents=True, exist_ok=True)
    answer = folder / f"{index}_answer.xlsx"
    output = folder / f"{index}_output.xlsx"
    _write(answer, answer_cells)
    _write(output, output_cells)
    return Pair(index, answer, output, forms[rng.randrange(len(forms))])


def make_pairs(seed: int, count: int, folder: Path, forms: tuple[str, ...]) -> list[Pair]:
    return [make_pair(seed, index, folder, forms) for index in range(count)]

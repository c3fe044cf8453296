"""Excel's own reading of a formula where IronCalc reads it differently, as formula rewrites.

The hybrid engine (:mod:`spreadrl.env.spreadsheet.recalc.hybrid`) runs every formula through
:func:`rewrite_formula` before IronCalc's second evaluation. A rule rewrites a
formula into one IronCalc computes the way Excel computes the original, so the
value is still IronCalc's and the cells that depend on it see it. Each rule is
Excel's documented behaviour; none looks at file or sheet names. A rule decides
on literal arguments and single-cell references only (their values as IronCalc
computed them); anything else is left alone, and keeps IronCalc's value.

* ``_xHHHH_`` escapes in string literals. The text of ``<f>`` is an
  ``ST_Xstring`` (ECMA-376 Part 1, 22.9.2.19): ``_x000F_`` is the character
  U+000F and ``_x005F_`` an escaped underscore, so Excel reads
  ``"_x005F_x000F_"`` as the 7 characters ``_x000F_``. IronCalc decodes the
  escapes in cell values but not in formulas.
* The intersection operator, a space between two references (Excel's
  "Calculation operators and precedence": ``SUM(B7:D7 C6:C8)``): rewritten to
  the intersected range, or to ``#NULL!`` when the ranges do not intersect
  (Excel's ``#NULL!`` documentation). IronCalc 0.9 cannot parse it (``#ERROR!``).
* DEC2BIN/DEC2OCT/DEC2HEX with ``places`` zero or negative: ``#NUM!`` (Excel's
  function reference: "If places is zero or negative, DEC2BIN returns the #NUM!
  error value"), and above 10, the most digits these functions write; Excel
  checks places before the number (its cached ``DEC2BIN("E",0)`` is ``#NUM!``,
  ``DEC2BIN("E",1)`` ``#VALUE!``), IronCalc after (``#VALUE!`` for both).
* BIN2*/OCT2*/HEX2* of text that is not a number in that base of at most 10
  digits: ``#NUM!`` ("If number is not a valid hexadecimal number, HEX2DEC
  returns the #NUM! error value"; likewise for binary and octal). The
  ``formulas`` package, which the hybrid uses for these functions, accepts a
  sign (``HEX2DEC("-A")``).
* YEAR/MONTH/DAY of date text: Excel converts the text as DATEVALUE does,
  which returns ``#VALUE!`` for a date outside 1900-01-01..9999-12-31 ("DATEVALUE
  returns the #VALUE! error value if the value of the date_text argument falls
  outside of this range"); IronCalc converts it to an out-of-range serial and
  returns ``#NUM!``. Rewritten to ``YEAR(DATEVALUE(x))`` when ``x`` is text that
  is neither a number nor a time.
* YEAR/MONTH/DAY/WEEKDAY of a serial from 0 to 60 (1900-01-00 to the fictitious
  1900-02-29): Excel keeps Lotus 1-2-3's calendar, which counts 1900 as a leap
  year (Microsoft, "Excel incorrectly assumes that the year 1900 is a leap year",
  KB 214326: serial 60 is 1900-02-29, serial 1 is 1900-01-01), and day 0 is
  "January 0, 1900" (``DAY(0)`` 0, ``MONTH(0)`` 1, ``YEAR(0)`` 1900; WEEKDAY counts
  serial 1 a Sunday, so ``WEEKDAY(0)`` is 7). IronCalc maps these serials one day
  off (``YEAR(1)`` 1899, ``DAY(59)`` 27) and returns ``#NUM!`` for 0. The call is
  replaced by Excel's value when its argument is a number (a literal or a single
  cell); WEEKDAY only with its default return type 1.
* VLOOKUP/HLOOKUP with a column (row) index below 1: ``#VALUE!`` (Excel's VLOOKUP
  reference: "If col_index_num is less than 1, VLOOKUP returns the #VALUE! error
  value"; above the table's width it is ``#REF!``); IronCalc returns ``#REF!`` for
  both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from openpyxl.utils.cell import column_index_from_string, get_column_letter

from spreadrl.env.spreadsheet.recalc.errors import is_error_value

MAX_ROW = 1048576
MAX_COLUMN = 16384
UNKNOWN = object()  # an argument whose value a rule cannot know without evaluating it

# A value lookup: (sheet name or None for the formula's own sheet, "A1") -> value or UNKNOWN.
ValueOf = Callable[[str | None, str], Any]

_STRING = re.compile(r'"(?:[^"]|"")*"')
_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")
_SHEET = r"(?:'(?:[^']|'')+'|[A-Za-z_][A-Za-z0-9_.]*)!"
_CELL = r"\$?[A-Za-z]{1,3}\$?\d+"
_AREA = rf"(?:{_CELL}(?::{_CELL})?|\$?[A-Za-z]{{1,3}}:\$?[A-Za-z]{{1,3}}|\$?\d+:\$?\d+)"
_REF = rf"(?:{_SHEET})?{_AREA}"
_BEFORE = r"(?<![A-Za-z0-9_.$!:'#])"
_AFTER = r"(?![A-Za-z0-9_.(!:$])"
_INTERSECTION = re.compile(rf"{_BEFORE}({_REF})( +)({_REF}){_AFTER}")
_NULL_CHAIN = re.compile(rf"#NULL!( +){_REF}{_AFTER}|{_BEFORE}{_REF}( +)#NULL!")
_SINGLE_CELL = re.compile(rf"^({_SHEET})?(\$?[A-Za-z]{{1,3}}\$?\d+)$")
_PARTS = re.compile(r"^\$?([A-Za-z]{1,3})?\$?(\d+)?$")
_NUMBER_LITERAL = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[Ee][-+]?\d+)?$")
# Text Excel reads as a number (currency, thousands separators, percent, exponent).
_NUMERIC_TEXT = re.compile(r"^[-+]?\$?(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d*)?(?:[Ee][-+]?\d+)?%?$")
_BASE_DIGITS = {"BIN": "[01]", "OCT": "[0-7]", "HEX": "[0-9A-Fa-f]"}
_DEC2 = re.compile(r"^DEC2(?:BIN|OCT|HEX)$")
_BASE2 = re.compile(r"^(BIN|OCT|HEX)2(?:BIN|OCT|DEC|HEX)$")
_DATE_PARTS = frozenset({"YEAR", "MONTH", "DAY"})
_LOTUS_PARTS = frozenset({"YEAR", "MONTH", "DAY", "WEEKDAY"})
_LOOKUPS = frozenset({"VLOOKUP", "HLOOKUP"})
_CALL = re.compile(r"(?<![A-Za-z0-9_.])((?:_xlfn\.)?[A-Za-z][A-Za-z0-9.]*)\s*\(", re.IGNORECASE)
# Cheap pre-test: could any rule apply to this formula?
_MAYBE = re.compile(
    r"_x[0-9A-Fa-f]{4}_|[\w$)'] +[$'A-Za-z0-9]|2(?:BIN|OCT|DEC|HEX)|YEAR|MONTH|DAY|LOOKUP", re.I
)


def decode_escapes(formula: str) -> str:
    """``formula`` with the ``_xHHHH_`` escapes of its string literals decoded (ST_Xstring)."""

    def literal(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        if "_x" not in inner:
            return match.group(0)
        decoded = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), inner.replace('""', '"'))
        return '"' + decoded.replace('"', '""') + '"'

    return _STRING.sub(literal, formula)


def mask_strings(formula: str) -> str:
    """``formula`` with string-literal contents blanked (same length), so code searches skip them."""
    return _STRING.sub(lambda m: '"' + "x" * (len(m.group(0)) - 2) + '"', formula)


def _area(ref: str) -> tuple[str | None, int, int, int, int] | None:
    """(sheet or None, first row, first column, last row, last column) of an A1 reference."""
    sheet = None
    if "!" in ref:
        sheet, ref = ref.rsplit("!", 1)
        if sheet.startswith("'"):
            sheet = sheet[1:-1].replace("''", "'")
    ends = ref.split(":")
    if len(ends) == 1:
        ends = ends * 2
    corners = []
    for text in ends:
        match = _PARTS.match(text)
        if match is None or not (match.group(1) or match.group(2)):
            return None
        column = column_index_from_string(match.group(1).upper()) if match.group(1) else None
        row = int(match.group(2)) if match.group(2) else None
        corners.append((row, column))
    (r1, c1), (r2, c2) = corners
    r1, r2 = (r1, r2) if r1 is not None else (1, MAX_ROW)
    c1, c2 = (c1, c2) if c1 is not None else (1, MAX_COLUMN)
    if r1 is None or r2 is None or c1 is None or c2 is None:
        return None
    return sheet, min(r1, r2), min(c1, c2), max(r1, r2), max(c1, c2)


def _same_sheet(a: str | None, b: str | None, own: str | None) -> bool:
    first, second = a if a is not None else own, b if b is not None else own
    if first is None or second is None:
        return a is None and b is None
    return first.casefold() == second.casefold()


def _intersect(left: str, right: str, own_sheet: str | None) -> str | None:
    """The intersection of two references as a reference, ``#NULL!`` if empty; None if unknown."""
    a, b = _area(left), _area(right)
    if a is None or b is None or not _same_sheet(a[0], b[0], own_sheet):
        return None
    r1, c1 = max(a[1], b[1]), max(a[2], b[2])
    r2, c2 = min(a[3], b[3]), min(a[4], b[4])
    if r1 > r2 or c1 > c2:
        return "#NULL!"
    prefix = left.rsplit("!", 1)[0] + "!" if "!" in left else ""
    start = f"{get_column_letter(c1)}{r1}"
    end = f"{get_column_letter(c2)}{r2}"
    return prefix + (start if start == end else f"{start}:{end}")


def rewrite_intersections(formula: str, own_sheet: str | None = None) -> str:
    """``formula`` with each ``ref ref`` intersection replaced by its range or ``#NULL!``."""
    for _ in range(20):  # chains (A B C) resolve one pair per pass
        masked = mask_strings(formula)
        match = _INTERSECTION.search(masked)
        if match is None:
            break
        merged = _intersect(match.group(1), match.group(3), own_sheet)
        if merged is None:
            break
        formula = formula[: match.start()] + merged + formula[match.end() :]
    while (match := _NULL_CHAIN.search(mask_strings(formula))) is not None:
        formula = formula[: match.start()] + "#NULL!" + formula[match.end() :]
    return formula


def function_calls(code: str) -> list[tuple[str, int, int, list[tuple[int, int]]]]:
    """(name, start, end, argument spans) of every function call in ``code``, by start.

    ``code`` must have its string literals blanked (:func:`mask_strings`). Names are
    upper case without an ``_xlfn.`` prefix; ``,`` or ``;`` separate arguments. One pass
    with a stack, linear in the formula's length: formulas are hostile input, and a
    rescan per call took 0.4 s on one 8,000-character formula of 1,300 nested calls.
    Calls left open at the end (an unbalanced formula) are not listed.
    """
    starts = {m.end() - 1: m for m in _CALL.finditer(code)}
    found = []
    stack: list[list[Any]] = []  # [name or None, start, start of the current argument, spans]
    for i, char in enumerate(code):
        if char == "(" or char == "{":
            call = starts.get(i) if char == "(" else None
            name = call.group(1).upper() if call else None
            if name is not None and name.startswith(("_XLFN.", "_XLWS.")):
                name = name[6:]
            stack.append([name, call.start() if call else i, i + 1, []])
        elif char in ",;" and stack:
            frame = stack[-1]
            frame[3].append((frame[2], i))
            frame[2] = i + 1
        elif char in ")}" and stack:
            name, start, argument_start, spans = stack.pop()
            if name is None:
                continue
            spans.append((argument_start, i))
            if len(spans) == 1 and not code[argument_start:i].strip():
                spans = []
            found.append((name, start, i + 1, spans))
    found.sort(key=lambda call: call[1])
    return found


def _argument(text: str, value_of: ValueOf) -> object:
    """The value of one argument when it is a literal or a single cell, else UNKNOWN."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"' and _STRING.fullmatch(text):
        return text[1:-1].replace('""', '"')
    if _NUMBER_LITERAL.match(text):
        return float(text)
    if text.upper() in ("TRUE", "FALSE"):
        return text.upper() == "TRUE"
    match = _SINGLE_CELL.match(text)
    if match is None:
        return UNKNOWN
    sheet = match.group(1)
    if sheet is not None:
        sheet = sheet[:-1]
        if sheet.startswith("'"):
            sheet = sheet[1:-1].replace("''", "'")
    return value_of(sheet, match.group(2).replace("$", "").upper())


def lotus_date_part(name: str, serial: float) -> int | None:
    """Excel's YEAR/MONTH/DAY/WEEKDAY of a serial in 0..60 (1900 a leap year), else None."""
    day = math.floor(serial)
    if not 0 <= day < 61:
        return None
    if name == "YEAR":
        return 1900
    if name == "MONTH":
        return 1 if day <= 31 else 2
    if name == "DAY":
        return day if day <= 31 else day - 31
    return (day - 1) % 7 + 1  # WEEKDAY, return type 1: serial 1 (1900-01-01) a Sunday


def _call_rule(name: str, args: list[Any]) -> tuple[str, str] | None:
    """('replace', text) or ('datevalue', '') when Excel's rule applies to this call."""
    if name in _LOOKUPS and 3 <= len(args) <= 4:
        index = args[2]
        if (
            isinstance(index, int | float)
            and not isinstance(index, bool)
            and math.trunc(index) < 1
            and args[0] is not UNKNOWN
            and not is_error_value(args[0])
        ):
            return ("replace", "#VALUE!")
        return None
    if name in _LOTUS_PARTS and args:
        serial = 0.0 if args[0] is None else args[0]  # an empty cell is 0 to Excel
        default_type = len(args) == 1 or (name == "WEEKDAY" and len(args) == 2 and args[1] == 1.0)
        if isinstance(serial, int | float) and not isinstance(serial, bool) and default_type:
            value = lotus_date_part(name, float(serial))
            if value is not None:
                return ("replace", str(value))
    if _DEC2.match(name) and len(args) == 2:
        number, places = args
        if (
            isinstance(places, float)
            and number is not UNKNOWN
            and not is_error_value(number)
            and not 1 <= math.trunc(places) <= 10
        ):
            return ("replace", "#NUM!")
        return None
    base = _BASE2.match(name)
    if base and 1 <= len(args) <= 2:
        number = args[0]
        digits = _BASE_DIGITS[base.group(1)]
        if (
            isinstance(number, str)
            and number
            and not is_error_value(number)
            and not re.fullmatch(f"{digits}{{1,10}}", number)
        ):
            return ("replace", "#NUM!")
        return None
    if name in _DATE_PARTS and len(args) == 1:
        text = args[0]
        if (
            isinstance(text, str)
            and text.strip()
            and not is_error_value(text)
            and ":" not in text
            and not _NUMERIC_TEXT.match(text.strip().replace(" ", ""))
        ):
            return ("datevalue", "")
    return None


def rewrite_calls(formula: str, value_of: ValueOf) -> str:
    """``formula`` with the calls Excel's argument rules decide replaced (see the module doc)."""
    masked = mask_strings(formula)
    edits: list[tuple[int, int, str]] = []
    for name, start, end, spans in function_calls(masked):
        if not (
            _DEC2.match(name) or _BASE2.match(name) or name in _LOTUS_PARTS or name in _LOOKUPS
        ):
            continue
        args = [_argument(formula[a:b], value_of) for a, b in spans]
        rule = _call_rule(name, args)
        if rule is None:
            continue
        kind, error = rule
        if kind == "replace":
            edits.append((start, end, error))
        else:
            a, b = spans[0]
            edits.append((a, b, f"DATEVALUE({formula[a:b].strip()})"))
    # apply from the end, skipping edits nested in one already applied
    edits.sort(key=lambda e: (e[0], -e[1]))
    kept: list[tuple[int, int, str]] = []
    for edit in edits:
        if kept and edit[0] < kept[-1][1]:
            continue
        kept.append(edit)
    for start, end, text in reversed(kept):
        formula = formula[:start] + text + formula[end:]
    return formula


def rewrite_formula(formula: str, value_of: ValueOf, own_sheet: str | None = None) -> str:
    """``formula`` (with its ``=``) as IronCalc must see it to compute what Excel computes.

    Returns ``formula`` itself (the same object) when no rule applies.
    """
    if not _MAYBE.search(formula):
        return formula
    new = decode_escapes(formula)
    new = rewrite_intersections(new, own_sheet)
    new = rewrite_calls(new, value_of)
    return formula if new == formula else new

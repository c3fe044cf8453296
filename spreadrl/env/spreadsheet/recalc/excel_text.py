"""Excel's number-to-text conversion, for text that IronCalc built from numbers.

Excel turns a number into text (``A1&""``, ``CONCATENATE``, ``CONCAT``,
``TEXTJOIN``) with its General format at 15 significant digits: ``=1/3&""``
is ``"0.333333333333333"``, ``=(0.1+0.2)&""`` is ``"0.3"``, and numbers from
1E+15 up or below 1E-9 are written in scientific form (``"1.23456789012346E+17"``,
``"1E-10"``). IronCalc writes the shortest text that round-trips the double
(``"0.3333333333333333"``, ``"0.30000000000000004"``, ``"123456789012345680"``).

Because IronCalc's text round-trips, the double can be recovered from it and
rewritten Excel's way. Only numbers that cannot be Excel's own output are
touched (more than 15 significant digits, or out of the decimal range), and
never a number that contains a digit run written literally in the formula (text
constants such as an ID, with or without more digits appended).
"""

from __future__ import annotations

import re
from decimal import Decimal

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_STRING = re.compile(r'"(?:[^"]|"")*"')
_TEXT_FUNCTIONS = re.compile(r"\b(?:CONCATENATE|CONCAT|TEXTJOIN)\s*\(", re.IGNORECASE)


def excel_number_text(value: float) -> str:
    """``value`` as Excel's General format writes it into text (15 significant digits)."""
    if value == 0:
        return "0"
    mantissa, exponent = f"{value:.14E}".split("E")
    exp = int(exponent)
    if -9 <= exp < 15:
        text = format(Decimal(f"{mantissa}E{exp}"), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}E{'+' if exp >= 0 else '-'}{abs(exp):02d}"


def _suspicious(number: str) -> bool:
    digits = number.lstrip("-").replace(".", "")
    if len(digits.lstrip("0")) > 15 or len(digits.split(".")[0]) > 15:
        return True
    value = float(number)
    return value != 0 and abs(value) < 1e-9


def builds_text_from_values(formula: str) -> bool:
    """True when ``formula`` concatenates (``&`` outside a string, or a CONCAT-like function)."""
    code = _STRING.sub('""', formula)
    return "&" in code or bool(_TEXT_FUNCTIONS.search(code))


def fix_number_text(text: str, formula: str) -> str:
    """``text`` with every number IronCalc wrote in non-Excel form rewritten Excel's way.

    Returns ``text`` unchanged unless ``formula`` builds text from values and
    some number in it has more than 15 significant digits (or needs Excel's
    scientific form); digit strings written literally in the formula stay.
    """
    if not builds_text_from_values(formula):
        return text
    literal_digits = re.findall(r"\d{4,}", " ".join(_STRING.findall(formula)))

    def rewrite(match: re.Match[str]) -> str:
        number = match.group(0)
        if not _suspicious(number) or any(run in number for run in literal_digits):
            return number
        return excel_number_text(float(number))

    return _NUMBER.sub(rewrite, text)


def needs_fix(text: str) -> bool:
    """Cheap pre-test: does ``text`` hold a number IronCalc may have written in non-Excel form?"""
    return any(_suspicious(m.group(0)) for m in _NUMBER.finditer(text))

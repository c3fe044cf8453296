"""Excel's number-to-text conversion (15 significant digits, General format)."""

from __future__ import annotations

import pytest

from spreadrl.env.spreadsheet.recalc.excel_text import excel_number_text, fix_number_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.8, "0.8"),
        (1 / 3, "0.333333333333333"),
        (2 / 3, "0.666666666666667"),
        (0.1 + 0.2, "0.3"),
        (-1234567.891, "-1234567.891"),
        (0.0, "0"),
        (42.0, "42"),
        (123456789012345.0, "123456789012345"),
        (1e15, "1E+15"),
        (123456789012345678.0, "1.23456789012346E+17"),
        (1e-10, "1E-10"),
        (1.5e-12, "1.5E-12"),
        (0.000000001, "0.000000001"),
        (1e100, "1E+100"),
    ],
)
def test_excel_number_text(value: float, text: str) -> None:
    assert excel_number_text(value) == text


def test_fix_touches_only_non_excel_numbers_of_concatenations() -> None:
    assert fix_number_text("x 0.30000000000000004", '="x "&A1') == "x 0.3"
    assert fix_number_text("0.30000000000000004", "=A1+A2") == "0.30000000000000004"  # no &
    assert fix_number_text("a&b 0.30000000000000004", '="a&b "') == "a&b 0.30000000000000004"
    assert fix_number_text("0.8: 12", '=A1&": "&B1') == "0.8: 12"
    literal = '="12345678901234567"&A1'
    assert fix_number_text("123456789012345675", literal) == "123456789012345675"
    assert (
        fix_number_text("v=0.6666666666666666", '=_xlfn.CONCAT("v=",A1)') == "v=0.666666666666667"
    )

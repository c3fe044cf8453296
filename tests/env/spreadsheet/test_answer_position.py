"""answer_position parsing: real, hand-written strings are messy; recover what was meant."""

from __future__ import annotations

import pytest

from spreadrl.env.spreadsheet.checker import AnswerPositionError, parse_answer_position, range_cells
from spreadrl.errors import SpreadrlError

ACCEPTED = [
    ("A1:B5", [(None, "A1:B5")]),
    ("C3", [(None, "C3")]),
    ("c3", [(None, "C3")]),
    ("$A$1:$b$5", [(None, "A1:B5")]),
    ("Sheet1!A1:B5", [("Sheet1", "A1:B5")]),
    ("Sheet1!A1:B5,Sheet1!D1", [("Sheet1", "A1:B5"), ("Sheet1", "D1")]),
    ("Sheet1!A1:B5 , Sheet2!D1 ", [("Sheet1", "A1:B5"), ("Sheet2", "D1")]),
    ("'Sheet 1'!A1:B2", [("Sheet 1", "A1:B2")]),
    ("'Sales, 2023'!A1:B2,C3", [("Sales, 2023", "A1:B2"), (None, "C3")]),
    ("'Sales, 2023, Q1'!A1", [("Sales, 2023, Q1", "A1")]),
    ("'A1, B2'!C3", [("A1, B2", "C3")]),
    ("A1, Sheet2!B2:C3", [(None, "A1"), ("Sheet2", "B2:C3")]),
    ("'Sheet1!A1:B5'", [("Sheet1", "A1:B5")]),  # quotes around the whole reference
    ("Sheet1'!A1", [("Sheet1", "A1")]),  # stray closing quote
    ("'Sheet1!A1", [("Sheet1", "A1")]),  # stray opening quote
    ("''Sheet1''!A1", [("Sheet1", "A1")]),  # doubled quotes
    ("\u2018My Sheet\u2019!A1", [("My Sheet", "A1")]),  # curly quotes
    ("\u201cMy Sheet\u201d!A1:A3", [("My Sheet", "A1:A3")]),
    ("'It''s'!A1", [("It's", "A1")]),  # escaped quote
    ("'Hello!'!A1", [("Hello!", "A1")]),  # sheet name with '!'
    ("'Q1!Q2'!B2", [("Q1!Q2", "B2")]),
    ("'Sheet1'!'Sheet1'!A1:B2", [("Sheet1", "A1:B2")]),  # sheet repeated in the range
    ("Sheet1!'Sheet1!A1:B2'", [("Sheet1", "A1:B2")]),
    ("Sheet1!A1\uff1aB3", [("Sheet1", "A1:B3")]),  # full-width colon
    ("Sheet1!BD2:308", [("Sheet1", "BD2:BD308")]),  # row-only end
    ("A:G", [(None, "A:G")]),
    ("Sheet1!g:a", [("Sheet1", "A:G")]),
    ("B5:A1", [(None, "A1:B5")]),
    ("A1 : B5", [(None, "A1:B5")]),
    ("A1:B5,", [(None, "A1:B5")]),
    ("Data (2)!A1", [("Data (2)", "A1")]),
    ("'Sheet1'!A1:A3,'Sheet 2'!B1", [("Sheet1", "A1:A3"), ("Sheet 2", "B1")]),
]

REJECTED = [
    ("", "empty"),
    ("   ", "empty"),
    ("A1:B2:C3", "two parts"),
    ("''!A1", "empty sheet name"),
    ("!A1", "empty sheet name"),
    ("Sheet1!Sheet2!A1", "two '!'"),
    ("Sheet1!A1!B2", "two '!'"),
    ("'Sheet1'!'Sheet2'!A1", "two '!'"),
    ("'Sheet1'!", "no range"),
    ("'Sheet1'", "quoted sheet name 'Sheet1' with no range"),
    ("'Sheet1', 'Sheet2'!A1", "quoted sheet name 'Sheet1' with no range"),
    ("A1:B2, 'My Sheet'", "quoted sheet name 'My Sheet' with no range"),
    ("'Sheet 1',A1", "quoted sheet name 'Sheet 1' with no range"),
    ("Data", "not a cell range"),
    ("Sheet1!hello", "not a cell range"),
    ("A1:B", "cannot read range"),
    ("XFE1", "outside"),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_parse_accepts_messy_positions(text: str, expected: list) -> None:
    assert parse_answer_position(text) == expected


@pytest.mark.parametrize(("text", "fragment"), REJECTED)
def test_parse_rejects_what_cannot_be_meant(text: str, fragment: str) -> None:
    with pytest.raises(AnswerPositionError) as info:
        parse_answer_position(text)
    assert fragment in str(info.value)


def test_error_is_both_value_error_and_spreadrl_error() -> None:
    with pytest.raises(ValueError):
        parse_answer_position("A1:B2:C3")
    with pytest.raises(SpreadrlError):
        parse_answer_position("A1:B2:C3")


def test_range_cells_walks_column_by_column() -> None:
    assert range_cells("A1:B2") == [(1, 1), (2, 1), (1, 2), (2, 2)]
    assert range_cells("C3") == [(3, 3)]
    assert range_cells("A:B", max_row=2) == [(1, 1), (2, 1), (1, 2), (2, 2)]
    assert range_cells("A:A", max_row=0) == []

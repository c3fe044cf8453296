"""SpreadsheetBench's ``compare_cell_value`` after a transform, shared by both scorings.

spreadrl's checker and the exact SpreadsheetBench scoring differ only in how they
transform a cell's value: :func:`sbench_transform` is SpreadsheetBench's own, and
:func:`spreadrl.env.spreadsheet.checker.normalize_value` is it with two rules of its own
in front (times and durations); the comparison after either is one rule.
"""

from __future__ import annotations

import datetime as dt

_EPOCH = dt.datetime(1899, 12, 30)


def sbench_transform(value: object) -> object:
    """SpreadsheetBench's ``transform_value``, rule for rule (bool counts as a number)."""
    if isinstance(value, int | float):
        return round(float(value), 2)
    if isinstance(value, dt.time):
        return str(value)[:-3]
    if isinstance(value, dt.datetime):
        delta = value - _EPOCH
        return round(delta.days + delta.seconds / 86400.0, 0)
    if isinstance(value, str):
        try:
            return round(float(value), 2)
        except ValueError:
            return value
    return value


def transformed_values_match(a: object, b: object) -> bool:
    """None and "" are one empty, then the types must agree, then ==."""
    if (a is None or a == "") and (b is None or b == ""):
        return True
    if type(a) is not type(b):
        return False
    return bool(a == b)

"""SpreadsheetBench's ``compare_cell_value`` after a transform, shared by both scorings.

spreadrl's checker and the exact SpreadsheetBench scoring differ only in how they
transform a cell's value (:func:`spreadrl.env.spreadsheet.checker.normalize_value` vs
:func:`spreadrl.env.spreadsheet.sbench.sbench_transform`); the comparison after it is one rule.
"""

from __future__ import annotations


def transformed_values_match(a: object, b: object) -> bool:
    """None and "" are one empty, then the types must agree, then ==."""
    if (a is None or a == "") and (b is None or b == ""):
        return True
    if type(a) is not type(b):
        return False
    return bool(a == b)

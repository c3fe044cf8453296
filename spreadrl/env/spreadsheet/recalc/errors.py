"""Error values a recalculation can return, named by what they mean to the caller.

An engine answers an error cell with its text (``"#DIV/0!"``). Which texts count
depends on the question asked, so each question has its own set here and every
module reads it from this one place:

- :data:`EXCEL_ERRORS`: the errors Excel itself shows. A value here can be Excel's
  own verdict on the inputs, so it may stand as a result.
- :data:`ENGINE_ONLY_ERRORS`: codes IronCalc returns that Excel never shows.
- :data:`ERROR_VALUES`: both, i.e. any error a recalculation may hand back (for
  counting and rendering error cells, whoever produced them).
- :data:`UNEVALUATED`: IronCalc's errors that mean "could not compute this" (an
  unknown or unimplemented function, a construct it cannot parse) rather than a
  verdict; the hybrid engine gives such cells to LibreOffice and says why.
- :data:`FAILS_CHECK`: a recalculated formula cell holding one of these was not
  evaluated at all, so the checker reports it as a failure instead of comparing it.
"""

from __future__ import annotations

EXCEL_ERRORS: frozenset[str] = frozenset(
    {
        "#NULL!",
        "#DIV/0!",
        "#VALUE!",
        "#REF!",
        "#NAME?",
        "#NUM!",
        "#N/A",
        "#GETTING_DATA",
        "#SPILL!",
        "#CALC!",
    }
)
ENGINE_ONLY_ERRORS: frozenset[str] = frozenset({"#N/IMPL!", "#ERROR!", "#CIRC!"})
ERROR_VALUES: frozenset[str] = EXCEL_ERRORS | ENGINE_ONLY_ERRORS
UNEVALUATED: frozenset[str] = frozenset({"#NAME?", "#N/IMPL!", "#ERROR!", "#CALC!", "#SPILL!"})
FAILS_CHECK: frozenset[str] = frozenset({"#NAME?", "#N/IMPL!"})


def is_error_value(value: object) -> bool:
    """Whether ``value`` is an error any recalculation may return (:data:`ERROR_VALUES`)."""
    return isinstance(value, str) and value in ERROR_VALUES

"""The error-value sets: one module names them by meaning, and no other module writes its own."""

from __future__ import annotations

import ast
from pathlib import Path

from spreadrl.env.spreadsheet.recalc import errors

PACKAGE = Path(__file__).parents[3] / "spreadrl"
HOME = PACKAGE / "env" / "spreadsheet" / "recalc" / "errors.py"


def _error_literal_sets(path: Path) -> list[int]:
    """Lines of set literals holding two or more Excel error texts ("#DIV/0!", "#N/A", ...)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Set):
            texts = [
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            if sum(1 for t in texts if t in errors.ERROR_VALUES) >= 2:
                lines.append(node.lineno)
    return lines


def test_only_the_errors_module_spells_out_error_sets():
    found = {
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if path != HOME
        for line in _error_literal_sets(path)
    }
    assert not found, (
        f"error-value sets written outside env/spreadsheet/recalc/errors.py: {sorted(found)}"
    )
    assert _error_literal_sets(HOME)  # the scan does find sets where they are


def test_the_sets_mean_what_their_names_say():
    assert errors.ENGINE_ONLY_ERRORS.isdisjoint(errors.EXCEL_ERRORS)
    assert errors.ERROR_VALUES == errors.EXCEL_ERRORS | errors.ENGINE_ONLY_ERRORS
    # a value that fails the check is one the engine could not evaluate at all
    assert errors.FAILS_CHECK <= errors.UNEVALUATED <= errors.ERROR_VALUES
    assert errors.is_error_value("#N/IMPL!") and not errors.is_error_value("#N/A text")
    assert not errors.is_error_value(7)

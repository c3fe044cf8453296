"""Every place spreadrl opens a workbook calls the archive gate first (spreadrl.archive_gate).

The test reads every module of the package with ``ast`` (nothing runs) and finds
each call that hands a file to a workbook or zip reader: openpyxl's
``load_workbook``, ``zipfile.ZipFile``, IronCalc's ``load_from_xlsx``, pandas'
``read_excel``, a LibreOffice ``convert`` or ``loadComponentFromURL``. The
function around such a call must call ``check_archive`` (or ``scan_xlsx``,
whose first line does) before it, on an earlier line. A new reader that
bypasses the gate fails here, naming its file, function and line; a site that
reads something other than a workbook, or a path its caller gated, is listed in
``NOT_GATED_HERE`` with its reason.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "spreadrl"

# a reader's name -> where it counts ("convert" is LibreOffice's only in env/spreadsheet/recalc)
OPENERS = {
    "load_workbook": "",
    "ZipFile": "",
    "load_from_xlsx": "",
    "read_excel": "",
    "loadComponentFromURL": "",
    "convert": "env/spreadsheet/recalc/",
}
GATES = frozenset({"check_archive", "scan_xlsx"})

# (module path under spreadrl/, function) -> why no gate call is needed right there
NOT_GATED_HERE: dict[tuple[str, str], str] = {
    ("archive_gate.py", "_directory"): "the gate itself: parses the central directory only",
    ("data/download.py", "safe_extract"): "a downloaded dataset archive, not a workbook",
    (
        "data/importers/rl_release.py",
        "__post_init__",
    ): "the release's dataset archive; each workbook read from it is gated as bytes "
    "(is_xlsx_bytes) before it is written",
    (
        "env/spreadsheet/recalc/lo_service.py",
        "handle",
    ): "the LibreOffice service converts paths its clients sent; LibreOfficeEngine.recalculate "
    "gated each one",
    (
        "env/spreadsheet/recalc/uno_helper.py",
        "_recalculate",
    ): "runs inside soffice's Python on paths LibreOfficeEngine.recalculate gated",
}


def _name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _sites() -> list[tuple[str, str, int, bool]]:
    """(module, function, line, gated before it) for every opener call in the package."""
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text(), filename=str(path))
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
            gates = [c.lineno for c in calls if _name(c) in GATES]
            for call in calls:
                name = _name(call)
                opens = name in OPENERS and module.startswith(OPENERS[name])
                if opens and _innermost(func, call):
                    gated = any(line <= call.lineno for line in gates)
                    sites.append((module, func.name, call.lineno, gated))
    return sites


def _innermost(func: ast.AST, call: ast.Call) -> bool:
    """True when no function nested inside ``func`` holds ``call`` (it is judged there)."""
    for node in ast.walk(func):
        nested = node is not func and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if nested and any(inner is call for inner in ast.walk(node)):
            return False
    return True


def test_every_workbook_read_is_gated_first() -> None:
    ungated = [
        f"spreadrl/{module}:{line} in {func}() opens a workbook without check_archive before it"
        for module, func, line, gated in _sites()
        if not gated and (module, func) not in NOT_GATED_HERE
    ]
    assert not ungated, "\n".join(ungated)


def test_the_readers_found_are_the_ones_we_know() -> None:
    """The scan finds the real sites (so an empty result cannot pass by accident)."""
    found = {(module, func) for module, func, _, _ in _sites()}
    for site in [
        ("env/spreadsheet/workbook.py", "__init__"),
        ("env/spreadsheet/workbook.py", "reload"),
        ("env/spreadsheet/recalc/xlsx_scan.py", "scan_xlsx"),
        ("env/spreadsheet/recalc/xlsx_scan.py", "load_model"),
        ("serve/tasks.py", "check_upload"),
        ("data/importers/common.py", "is_xlsx_bytes"),
    ]:
        assert site in found, site
    stale = set(NOT_GATED_HERE) - found
    assert not stale, f"NOT_GATED_HERE names sites that no longer open anything: {stale}"


def test_a_reader_without_the_gate_is_caught(tmp_path, monkeypatch) -> None:
    """The rule fails on a module that opens a workbook ungated (and passes it once gated)."""
    module = tmp_path / "spreadrl"
    module.mkdir()
    (module / "rogue.py").write_text(
        "import openpyxl\n\ndef peek(path):\n    return openpyxl.load_workbook(path)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", module)
    assert _sites() == [("rogue.py", "peek", 4, False)]
    (module / "rogue.py").write_text(
        "import openpyxl\nfrom spreadrl.archive_gate import check_archive\n\n"
        "def peek(path):\n    check_archive(path)\n    return openpyxl.load_workbook(path)\n"
    )
    assert _sites() == [("rogue.py", "peek", 6, True)]

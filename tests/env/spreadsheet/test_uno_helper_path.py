"""uno_helper.py runs as a script under the system python3, so its own folder is the
first entry of ``sys.path``: a module there named like a standard-library module
(``locale.py`` once) replaces it, and the helper dies at its first import, before
LibreOffice starts. Every hybrid recalculation then falls back to IronCalc alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import spreadrl.env.spreadsheet.recalc as recalc_package

HELPER_DIR = Path(recalc_package.__file__).parent


def test_no_module_beside_the_uno_helper_shadows_the_standard_library() -> None:
    shadowing = sorted(p.name for p in HELPER_DIR.glob("*.py") if p.stem in sys.stdlib_module_names)
    assert not shadowing, f"rename {shadowing}: uno_helper.py imports the stdlib ones"


def test_the_helper_imports_its_modules_without_spreadrl_on_the_path(tmp_path: Path) -> None:
    """The script's own imports (up to its first LibreOffice use) run in a bare interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import runpy, sys; sys.argv = ['uno_helper.py']; "
        f"sys.path.insert(0, {str(HELPER_DIR)!r}); "
        "import subprocess, locale, json; print(locale.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert not out.strip().startswith(str(HELPER_DIR)), out

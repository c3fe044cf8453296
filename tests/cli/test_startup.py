"""`spreadrl --help` starts without the heavy libraries (style.md: the CLI is thin).

Every command module is imported to build the command tree, so a module-level
import of torch, transformers or the gym in any of them (or in the bench modules
the commands live in) would make every invocation, ``--help`` included, pay
seconds for it. They are imported inside the command bodies instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "openpyxl", "numpy", "fastapi", "vllm", "datasets")


def test_the_command_tree_imports_no_heavy_library():
    code = (
        f"import sys, spreadrl.cli.main\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

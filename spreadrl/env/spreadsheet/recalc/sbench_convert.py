"""Recalculate outputs the way SpreadsheetBench's ``evaluation/open_spreadsheet.py`` does.

Since SpreadsheetBench's commit 49b73a9 (PR #32) every output workbook goes
through ``soffice --headless --calc --convert-to "xlsx:Calc MS Excel 2007 XML"``
before ``evaluation.py`` reads it with ``openpyxl`` (``data_only=True``). That
conversion runs with LibreOffice's default settings, whose "recalculation on file
load" for Excel 2007+ files is *never*: a formula cell that carries a cached value
keeps it (even a stale one), and only cells without one are computed. This is not
what spreadrl's LibreOffice service does (it loads with "always recalculate" and
calls ``calculateAll``), so the service is not reused here: a different
conversion would give different verdicts on workbooks with stale caches.

Each call starts ``soffice`` with a fresh profile (default settings, as on the
clean machine the benchmark runs on; a private one so that two runs never fight
over a profile lock) and converts a batch of files in one process, one document
after another, exactly as one process per file would. Batches run side by side, one
``soffice`` per core (a conversion keeps one core busy; the batches share nothing). A
file LibreOffice fails to convert is left as it was, as upstream leaves it: the checker
then reads the file itself.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.recalc.libreoffice import INSTALL_HINT
from spreadrl.errors import MissingDependencyError

log = logging.getLogger(__name__)

FILTER = "xlsx:Calc MS Excel 2007 XML"
TIMEOUT_S = 120.0
"""Upstream's per-file limit (``subprocess.run(..., timeout=120)``)."""
BATCH = 40
"""Files per soffice process: one start serves many, and a crash costs a few. (300 files
in 2026-11-29's measurement on 2 cores, one process at a time: batches of 40 took 62 s,
of 20 79 s, of 300 162 s: LibreOffice slows down over a long batch.)"""
MAX_PROCESSES = 4
"""soffice processes at once at most (each holds a few hundred MB)."""


def _processes(batches: int) -> int:
    """How many batches to convert at once: one per core this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(batches, cores or 1, MAX_PROCESSES))


def _soffice(soffice: str | None) -> str:
    binary = soffice or recalc.find_soffice()
    if binary is None:
        raise MissingDependencyError(
            "--scoring spreadsheetbench recalculates outputs with LibreOffice as "
            "SpreadsheetBench does; " + INSTALL_HINT.split("engine needs ", 1)[-1]
        )
    return binary


def _run(binary: str, files: Sequence[Path], outdir: Path, profile: Path, timeout_s: float) -> str:
    command = [
        binary,
        f"-env:UserInstallation={profile.as_uri()}",
        "--headless",
        "--calc",
        "--convert-to",
        FILTER,
        "--outdir",
        str(outdir),
        *(str(f) for f in files),
    ]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return f"LibreOffice did not finish within {timeout_s:.0f} s"
    return "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()[-300:]


def convert_outputs(
    paths: Sequence[Path], *, soffice: str | None = None, timeout_s: float = TIMEOUT_S
) -> dict[Path, str]:
    """Convert every file of ``paths`` in place; return path -> why it was left as it was.

    Files are staged under unique names (``--convert-to`` names its result after the
    input's stem), converted :data:`BATCH` at a time per ``soffice`` process (one process
    per core at once), and each converted copy replaces its original. A file a batch did
    not convert is retried in a process of its own, so one bad workbook costs only itself.
    Raises MissingDependencyError when LibreOffice is not installed.
    """
    binary = _soffice(soffice)
    failures: dict[Path, str] = {}
    if not paths:
        return failures
    with tempfile.TemporaryDirectory(prefix="spreadrl-sbench-") as tmp:
        root = Path(tmp)
        staged = []
        for index, path in enumerate(paths):
            copy = root / "in" / f"f{index}{Path(path).suffix.lower() or '.xlsx'}"
            copy.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, copy)
            staged.append(copy)
        outdir = root / "out"
        chunks = [staged[start : start + BATCH] for start in range(0, len(staged), BATCH)]

        def convert(index: int) -> str:
            # a fresh profile per process: a soffice that died leaves its profile locked,
            # and the next one on it exits at once, with status 0 and nothing converted
            chunk = chunks[index]
            return _run(binary, chunk, outdir, root / f"profile-{index}", timeout_s * len(chunk))

        with ThreadPoolExecutor(_processes(len(chunks))) as pool:
            list(pool.map(convert, range(len(chunks))))  # a batch's error is found per file below
        for path, copy in zip(paths, staged, strict=True):
            produced = outdir / f"{copy.stem}.xlsx"
            if not produced.is_file():
                # the batch broke off (soffice may exit early, even with status 0): this
                # file gets its own process and its own limit
                error = _run(binary, [copy], outdir, root / f"profile-{copy.stem}", timeout_s)
                if not produced.is_file():
                    failures[Path(path)] = error or "LibreOffice wrote no converted file"
                    continue
            shutil.copyfile(produced, path)
    for path, why in failures.items():
        log.warning("%s: LibreOffice could not convert it (%s); scored as it is", path, why)
    return failures

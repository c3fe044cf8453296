"""The LibreOffice helper and soffice run under memory and per-recalculation CPU limits;
a workbook over the CPU budget fails its request and the next one gets a fresh soffice."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from spreadrl.env.spreadsheet import recalc
from spreadrl.env.spreadsheet.recalc.libreoffice import (
    LibreOfficeServer,
    LoLimits,
    _process_tree,
    uno_python,
)
from spreadrl.errors import ConfigError, WorkbookError
from tests.sysdeps import needs_libreoffice


def _book(path: Path, formulas: int) -> Path:
    wb = openpyxl.Workbook()
    for r in range(1, formulas + 1):  # about 6 ms of CPU each in soffice: 18 s, killed at 1-2 s
        wb.active.cell(r, 1).value = "=SUMPRODUCT(ROW($B$1:$B$100000)*1)"
    wb.save(path)
    return path


@pytest.mark.slow
@needs_libreoffice
def test_over_its_cpu_budget_soffice_fails_the_request_and_the_next_one_runs(tmp_path):
    heavy, light = _book(tmp_path / "heavy.xlsx", 3000), _book(tmp_path / "light.xlsx", 1)
    server = LibreOfficeServer(recalc.find_soffice(), uno_python(), limits=LoLimits(cpu_s=1))
    try:
        server.convert(light, tmp_path / "warm.xlsx")  # soffice started and limited
        first = {pid for pid in _process_tree(server._proc.pid)}
        soffice = max(first)  # the youngest: soffice.bin
        with open(f"/proc/{soffice}/limits") as handle:
            limits = handle.read()
        assert any(line.startswith("Max address space") and "4294967296" in line
                   for line in limits.splitlines()), limits  # fmt: skip
        with pytest.raises(WorkbookError, match="LibreOffice"):
            server.convert(heavy, tmp_path / "out.xlsx")
        server.convert(light, tmp_path / "again.xlsx")  # a fresh soffice
        assert (tmp_path / "again.xlsx").is_file()
        assert not first & set(_process_tree(server._proc.pid))
    finally:
        server.close()


def test_limits_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPREADRL_LIBREOFFICE_MEMORY_MB", "2048")
    monkeypatch.setenv("SPREADRL_LIBREOFFICE_CPU_S", "30")
    assert LoLimits.from_environment() == LoLimits(memory_mb=2048, cpu_s=30)
    monkeypatch.setenv("SPREADRL_LIBREOFFICE_CPU_S", "lots")
    with pytest.raises(ConfigError, match="SPREADRL_LIBREOFFICE"):
        LoLimits.from_environment()

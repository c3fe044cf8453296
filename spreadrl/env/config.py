"""EnvConfig: every knob of one Spreadsheet Gym episode, in one typed record.

Budgets (tool calls, wall time, observation size) and caps (cells per page,
cells per write, search results) live here so a recipe's YAML can set them and
the tools read them from one place instead of hard-coding numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spreadrl.config import option


@dataclass(frozen=True)
class EnvConfig:
    """Settings of a :class:`spreadrl.env.episode.SpreadsheetEnv` (defaults follow the public gym)."""

    tools: str | list[str] = "full"
    """Tool preset (``minimal`` | ``full``) or an explicit list of tool names."""
    max_tool_calls: int = 20
    """Tool calls allowed per episode; the call that spends the budget returns truncated=True."""
    wall_time_s: float = 900.0
    """Episode wall-clock budget in seconds, measured from reset."""
    max_observation_chars: int = 8000
    """Observations longer than this are cut, with an explicit marker saying so."""
    overview: Literal["none", "short", "full"] = "short"
    """Workbook overview in the first observation: none, a few rows, or more rows."""
    overview_rows: int | None = None
    """Rows shown per sheet after the first (header) row (None: 3 for short, 10 for full)."""
    overview_max_sheets: int = 10
    """Sheets described in the overview; the rest are only named."""
    page_cells: int = 200
    """Default page size of inspect_range / recalculate_and_read (cells per page)."""
    max_page_cells: int = 1000
    """Largest page size a call may ask for."""
    max_ranges: int = 20
    """Ranges per inspect_range / recalculate_and_read call."""
    max_write_cells: int = 10000
    """Cells one write_range / fill_formula / format_range / clear_range call may touch."""
    max_find_results: int = 500
    """Largest max_results a find_cells call may ask for."""
    engine: str = "ironcalc"
    """Recalculation engine for recalculate_and_read and scoring (the checker's engine)."""
    sandbox_mode: str = "auto"
    """code_interpreter sandbox: auto (bwrap, else rlimit with a warning), strict, rlimit."""
    code_wall_time_s: float = 120.0
    """Wall-clock limit of one code_interpreter call."""
    code_memory_mb: int = 1024
    """Address-space limit of one code_interpreter call."""
    keep_outputs_dir: str | None = None
    """When set, finish copies the output workbook here as ``{n}_{id}_output.xlsx``."""
    keep_workdir: bool = False
    """Keep the episode folder after finish/close (debugging)."""


@dataclass(frozen=True)
class EnvSettings:
    kind: Literal["spreadsheet", "code"] = option(
        "spreadsheet", "Which environment: the gym or math/code."
    )
    tools: list[str] = option(["full"], "Tool preset (minimal | full) or a list of tool names.")
    max_tool_calls: int = option(20, "Tool calls allowed per episode.")
    max_observation_chars: int = option(8000, "Observations are cut to this many characters.")
    overview: Literal["none", "short", "full"] = option(
        "short", "Workbook overview in the first turn."
    )

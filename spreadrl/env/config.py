"""EnvConfig: the recipe's ``env`` section and every knob of one episode, in one typed record.

Budgets (tool calls, observation size) and caps (cells per page, cells per
write, search results) live here so a recipe's YAML can set them
(``env.max_page_cells=500``) and the tools read them from one place instead of
hard-coding numbers. The same class is the YAML section and what
:class:`spreadrl.env.spreadsheet.episode.SpreadsheetEnv` reads: there is no translation
between them. The episode's wall-clock budget is the rollout's
(``rollout.episode_wall_time_s``), the only one. The math/code environment
(``kind: code``, :mod:`spreadrl.env.code.code_env`) reads this same section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from spreadrl.archive_gate import ArchiveLimits
from spreadrl.config import Section, option
from spreadrl.env.limits import WATCHDOG_GRACE_S, WorkerLimits
from spreadrl.env.spreadsheet.recalc import ENGINES
from spreadrl.env.spreadsheet.recalc.locales import LOCALES, check_locale_name
from spreadrl.errors import ConfigError

TOOL_PRESETS = ("minimal", "full", "spreadsheet-rl", "spreadsheet-rl-2606")
ENGINE_ALIASES = ("soffice",)  # get_engine's other name for libreoffice
IRONCALC_OK = tuple(name for name, ironcalc_name in LOCALES.items() if ironcalc_name)
CODE_MIN_OBSERVATION_CHARS = 200
"""Smallest observation the code env accepts: its labels and exit status need room."""


def check_engine_name(name: str, where: str) -> None:
    """Raise a ConfigError naming ``where`` unless ``name`` is a recalculation engine.

    Checked where the name is given (a flag, a config key), not when a formula
    first needs recalculating: a typo would otherwise pass unnoticed until then.
    """
    if not isinstance(name, str) or name.strip().lower() not in (*ENGINES, *ENGINE_ALIASES):
        raise ConfigError(
            f"{where} {name!r}: unknown recalculation engine; choose one of {', '.join(ENGINES)}"
        )


@dataclass(frozen=True)
class EnvConfig(Section):
    """Settings of the environment (defaults follow the public gym)."""

    kind: Literal["spreadsheet", "code", "openenv"] = option(
        "spreadsheet",
        "Which environment: the gym, math/code, or an OpenEnv server at env.url "
        "(docs/environments.md).",
    )
    url: str | None = option(
        None,
        "env.kind openenv: the OpenEnv server (http://host:port), e.g. `spreadrl env serve`; "
        "its tools, observations and reward replace the gym's.",
    )
    max_sessions: int | None = option(
        None,
        "env.kind openenv: sessions open on the server at once (null: one per episode of a "
        "batch); a batch runs in groups of this size, and a session the server refuses at "
        "capacity is retried with back-off.",
    )
    system_prompt: str | None = option(
        None,
        "env.kind openenv: the system prompt of a server that sends none (null: the recipe's "
        "rollout.system_prompt); the task text comes from the server's reset observation.",
    )
    tools: str | list[str] = option(
        "full",
        "Tool preset (minimal | full | spreadsheet-rl: the Spreadsheet-RL-4B checkpoint's "
        "contracts | spreadsheet-rl-2606: upstream's June 2026 scaffold; docs/tools.md) or a "
        "list of tool names.",
    )
    tool_descriptions: str | None = option(
        None,
        "spreadsheet-rl preset: a copy of upstream's configs/tool/spreadsheet_tools.yaml whose "
        "descriptions replace this project's wording (the argument facts must match).",
    )
    max_tool_calls: int = option(
        20, "Tool calls allowed per episode; the call that spends them returns truncated=True."
    )
    max_observation_chars: int = option(
        8000, "Observations are cut to this many characters, with a marker saying so."
    )
    overview: Literal["none", "short", "full"] = option(
        "short", "Workbook overview in the first turn: none, a few rows, or more rows."
    )
    overview_rows: int | None = option(
        None, "Rows shown per sheet after the header row (null: 3 for short, 10 for full)."
    )
    overview_max_sheets: int = option(10, "Sheets described in the overview; the rest are named.")
    page_cells: int = option(200, "Default page size of inspect_range / recalculate_and_read.")
    max_page_cells: int = option(1000, "Largest page size a call may ask for.")
    max_ranges: int = option(20, "Ranges per inspect_range / recalculate_and_read call.")
    max_write_cells: int = option(
        10000, "Cells one write_range / fill_formula / format_range / clear_range call may touch."
    )
    max_find_results: int = option(500, "Largest max_results a find_cells call may ask for.")
    # hybrid, the checker's default, so the reward is the checker's view: IronCalc, plus
    # Excel's rules and a per-process LibreOffice started only when a cell needs it
    # (docs/benchmarks.md, "Recalculation fidelity").
    engine: str = option(
        "hybrid",
        "Recalculation engine for recalculate_and_read and scoring: hybrid (the checker's), "
        "ironcalc, libreoffice.",
    )
    scoring: Literal["hybrid", "spreadsheetbench"] = option(
        "hybrid",
        "How the reward scores an output: hybrid (recalculate with env.engine, Excel's rules) "
        "or spreadsheetbench (SpreadsheetBench's own path: LibreOffice's conversion, its "
        "value rules and quirks; needs soffice; docs/checker.md).",
    )
    locale: str = option(
        "en-US",
        "Locale TEXT and number formats render in, for every engine the hybrid runs "
        "(en-US, en-GB, de-DE, fr-FR, es-ES, it-IT, zh-CN, ja-JP), or auto: read from the "
        "answer's cached TEXT results (docs/checker.md).",
    )
    sandbox_mode: Literal["auto", "strict", "rlimit"] = option(
        "auto",
        "code_interpreter sandbox: auto (bwrap, else rlimit with a warning), strict, rlimit.",
    )
    code_wall_time_s: float = option(120.0, "Wall-clock limit of one code_interpreter call.")
    code_memory_mb: int = option(1024, "Address-space limit of one code_interpreter call.")
    # the archive gate (spreadrl.archive_gate): Spreadsheet-RL's own tools check the same four
    max_workbook_mb: float = option(
        512.0, "A workbook whose members hold more than this many MiB uncompressed is refused."
    )
    max_workbook_member_mb: float = option(
        128.0, "A workbook with a member over this many MiB uncompressed is refused."
    )
    max_workbook_members: int = option(
        50_000, "A workbook archive of more members than this is refused."
    )
    max_workbook_ratio: float = option(
        200.0, "A workbook member (over 1 MiB) or archive compressed beyond this ratio is refused."
    )
    # limits of each environment worker process (spreadrl.env.limits; not with workers: 0)
    worker_memory_mb: int = option(
        4096, "Address-space limit of each environment worker process, in MiB (0: none)."
    )
    worker_cpu_s: int = option(
        300,
        "CPU seconds one tool call or grading may use in a worker; over it the episode ends "
        "scored 0 (env_limit). 0: no limit.",
    )
    keep_outputs_dir: str | None = option(
        None, "When set, finish copies the output workbook here as {n}_{id}_output.xlsx."
    )
    keep_workdir: bool = option(False, "Keep the episode folder after finish/close (debugging).")

    def archive_limits(self) -> ArchiveLimits:
        """The archive gate's limits as this section sets them."""
        return ArchiveLimits(
            max_total_mb=self.max_workbook_mb,
            max_member_mb=self.max_workbook_member_mb,
            max_members=self.max_workbook_members,
            max_ratio=self.max_workbook_ratio,
        )

    def worker_limits(self) -> WorkerLimits:
        """The environment workers' limits as this section sets them."""
        grace = self.code_wall_time_s + WATCHDOG_GRACE_S  # the watchdog waits out the sandbox
        return WorkerLimits(
            memory_mb=self.worker_memory_mb,
            cpu_s=self.worker_cpu_s,
            wall_s=self.worker_cpu_s + grace if self.worker_cpu_s else 0.0,
        )

    def validate(self) -> None:
        # one spelling per meaning: a one-preset list or "a,b" text become the preset / a list
        tools = self.tools
        if isinstance(tools, str) and "," in tools:
            tools = [t.strip() for t in tools.split(",") if t.strip()]
        if isinstance(tools, list) and len(tools) == 1 and tools[0] in TOOL_PRESETS:
            tools = tools[0]
        if not tools:
            raise ConfigError(
                "env.tools is empty; use a preset (minimal | full | spreadsheet-rl | "
                "spreadsheet-rl-2606) or tool names"
            )
        object.__setattr__(self, "tools", tools)
        if self.tool_descriptions and tools != "spreadsheet-rl":
            raise ConfigError(
                "env.tool_descriptions applies to the spreadsheet-rl tools only; "
                f"env.tools is {tools!r}"
            )
        check_engine_name(self.engine, "env.engine")
        check_locale_name(self.locale, "env.locale")
        if self.engine.strip().lower() == "ironcalc" and self.locale not in ("auto", *IRONCALC_OK):
            raise ConfigError(
                f"env.locale {self.locale}: IronCalc alone cannot render it; use env.engine "
                "hybrid or libreoffice (LibreOffice renders every locale spreadrl knows)"
            )
        if self.scoring not in ("hybrid", "spreadsheetbench"):
            raise ConfigError(
                f"env.scoring is {self.scoring!r}; use one of hybrid, spreadsheetbench"
            )
        self._check_openenv()
        for name in (
            "max_workbook_mb",
            "max_workbook_member_mb",
            "max_workbook_members",
            "max_workbook_ratio",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"env.{name} must be positive, got {getattr(self, name)}")
        for name in ("worker_memory_mb", "worker_cpu_s"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"env.{name} must be 0 (no limit) or more, got {getattr(self, name)}"
                )
        for name in ("max_tool_calls", "max_observation_chars", "page_cells", "max_write_cells"):
            if getattr(self, name) < 1:
                raise ConfigError(f"env.{name} must be at least 1, got {getattr(self, name)}")
        # YAML is checked against the Literal on loading; a section built in code is not
        if self.sandbox_mode not in ("auto", "strict", "rlimit"):
            raise ConfigError(
                f"env.sandbox_mode is {self.sandbox_mode!r}; use one of auto, strict, rlimit"
            )
        # the code env labels stdout, stderr and the exit status inside the observation
        if self.kind == "code" and self.max_observation_chars < CODE_MIN_OBSERVATION_CHARS:
            raise ConfigError(
                f"env.max_observation_chars must be at least {CODE_MIN_OBSERVATION_CHARS} "
                f"with env.kind=code, got {self.max_observation_chars}"
            )

    def _check_openenv(self) -> None:
        """env.url goes with env.kind openenv, and is an http(s) or ws(s) address."""
        if self.kind == "openenv":
            if not self.url or not self.url.startswith(("http://", "https://", "ws://", "wss://")):
                raise ConfigError(
                    "env.kind openenv needs env.url, the OpenEnv server's address "
                    f"(http://host:port), got {self.url!r}"
                )
        elif self.url:
            raise ConfigError(f"env.url applies to env.kind openenv only; env.kind is {self.kind}")
        if self.max_sessions is not None and self.max_sessions < 1:
            raise ConfigError(f"env.max_sessions must be at least 1, got {self.max_sessions}")

"""SpreadsheetEnv: one episode of the Spreadsheet Gym (reset -> step ... -> finish).

The contract follows Gymnasium's spirit for text agents. ``reset`` copies the
case's input workbook into a private temporary folder and returns the
instruction, a short workbook overview and the tool schemas; ``step`` runs one
tool call and returns its observation (bad calls are ordinary error
observations, the episode goes on); ``finish`` saves the working copy, scores
it with the answer checker and returns the reward. Budgets come from
:class:`EnvConfig`: the call that spends ``max_tool_calls`` comes back with
``truncated=True``, and so does every call after the wall-time budget.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spreadrl import archive_gate
from spreadrl.archive_gate import WorkbookRefused
from spreadrl.data.task import Task
from spreadrl.env.config import EnvConfig
from spreadrl.env.limits import EnvLimitExceeded
from spreadrl.env.spreadsheet import checker
from spreadrl.env.spreadsheet.cell_changes import CellChangeTracker
from spreadrl.env.spreadsheet.tools import ToolContext, ToolError, resolve_tools
from spreadrl.env.spreadsheet.tools.srl import with_upstream_descriptions
from spreadrl.env.spreadsheet.workbook import (
    WorkingCopy,
    cell_value,
    column_letter,
    render_value,
    truncate,
)
from spreadrl.env.types import (
    EndReason,
    EpisodeResult,
    Mismatch,
    Observation,
    StepResult,
    ToolCall,
)
from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)


class SpreadsheetEnv:
    """One episode at a time over a private working copy; reusable after finish."""

    def __init__(self, config: EnvConfig | None = None, workdir_root: Path | None = None) -> None:
        self.config = config or EnvConfig()
        archive_gate.configure(self.config.archive_limits())
        self.tools = {t.name: t for t in resolve_tools(self.config.tools)}
        self.schemas = [t.schema() for t in self.tools.values()]
        if self.config.tool_descriptions:  # upstream's wording, from the user's copy of it
            self.schemas = with_upstream_descriptions(self.schemas, self.config.tool_descriptions)
        self.workdir_root = Path(workdir_root) if workdir_root is not None else None
        self.folder: Path | None = None
        self.ctx: ToolContext | None = None
        self.task: Task | None = None
        self.case = 1
        self.output_path: Path | None = None
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.tool_calls = 0
        self.tool_errors = 0
        self.stop_reason: EndReason | None = None
        self.ended_because = ""  # why the environment ended the episode (scored 0)
        self.started = time.monotonic()
        self.tool_time: dict[str, list[float]] = {}
        self.cell_changes = CellChangeTracker()  # what each call changed, for run viewers

    # ---- episode -----------------------------------------------------------
    def reset(
        self, task: Task, case: int = 1, output_path: str | Path | None = None
    ) -> Observation:
        """Start an episode on ``task``'s case ``case`` (a private copy of its input)."""
        self.close()
        task_case = task.case(case)
        if self.workdir_root is not None:
            self.workdir_root.mkdir(parents=True, exist_ok=True)
        self.folder = Path(tempfile.mkdtemp(prefix="spreadrl-episode-", dir=self.workdir_root))
        try:
            book = WorkingCopy(self.folder, task_case.input_path)
        except BaseException:
            self.close()
            raise
        self.ctx = ToolContext(book=book, config=self.config, folder=self.folder)
        self.task, self.case = task, case
        self.output_path = Path(output_path) if output_path is not None else None
        self._reset_counters()
        return Observation(
            instruction=task.instruction,
            workbook_overview=self.overview(),
            tool_schemas=list(self.schemas),
            info={
                "task_id": task.id,
                "case": case,
                "episode_dir": str(self.folder),
                "parallel_safe_tools": [t.name for t in self.tools.values() if t.parallel_safe],
            },
        )

    def step(self, call: ToolCall | dict[str, Any]) -> StepResult:
        """Run one tool call; errors the model can fix come back as ``ok=False`` observations."""
        if self.ctx is None:
            raise SpreadrlError(
                "step() before reset(): start an episode with env.reset(task, case)"
            )
        if isinstance(call, dict):
            if not isinstance(call.get("name"), str):
                return self._error("a tool call needs a 'name' string and an 'arguments' object")
            call = ToolCall(name=call["name"], arguments=call.get("arguments") or {})
        cfg = self.config
        if self.stop_reason is not None:
            return self._error(
                f"the episode's budget is spent ({self.stop_reason}); give your final answer",
                truncated=True,
            )
        self.tool_calls += 1
        truncated = self.tool_calls >= cfg.max_tool_calls
        if truncated:
            self.stop_reason = EndReason.MAX_TOOL_CALLS
        tool = self.tools.get(call.name)
        if tool is None:
            valid = ", ".join(self.tools)
            return self._error(f"unknown tool {call.name!r}; available tools: {valid}", truncated)
        self.cell_changes.before(self.ctx.book)
        start = time.perf_counter()
        try:
            text = tool.call(self.ctx, call.arguments)
        except ToolError as exc:
            self._time(call.name, start)
            reply = getattr(exc, "observation", None)  # a preset's own error reply (JSON)
            return self._error(str(exc), truncated, tool=call.name, reply=reply)
        except WorkbookRefused as exc:
            self._time(call.name, start)
            return self._end(EndReason.WORKBOOK_REFUSED, str(exc), call.name)
        except (MemoryError, EnvLimitExceeded) as exc:  # the worker's limits (env.limits)
            self._time(call.name, start)
            return self._end(EndReason.ENV_LIMIT, _limit_message(exc), call.name)
        elapsed = self._time(call.name, start)
        return StepResult(
            observation=truncate(text, cfg.max_observation_chars),
            ok=True,
            truncated=truncated,
            info={
                "tool": call.name,
                "duration_s": elapsed,
                **self.cell_changes.after(self.ctx.book),
            },
        )

    def _time(self, name: str, start: float) -> float:
        elapsed = time.perf_counter() - start
        self.tool_time.setdefault(name, []).append(elapsed)
        return elapsed

    def _error(
        self,
        message: str,
        truncated: bool = False,
        tool: str | None = None,
        reply: str | None = None,
    ) -> StepResult:
        self.tool_errors += 1
        text = truncate(reply or f"Error: {message}", self.config.max_observation_chars)
        return StepResult(observation=text, ok=False, truncated=truncated, info={"tool": tool})

    def _end(self, reason: EndReason, message: str, tool: str) -> StepResult:
        """End the episode from inside a step (a refused workbook): scored 0 at finish."""
        self.stop_reason, self.ended_because = reason, message
        result = self._error(message, tool=tool)
        info = {**result.info, "end_reason": str(reason)}
        return StepResult(result.observation, ok=False, terminated=True, info=info)

    def finish(
        self, final_answer: str | None = None, output_path: str | Path | None = None
    ) -> EpisodeResult:
        """Save the working copy, score it against the case's answer, clean up."""
        if self.ctx is None:
            raise SpreadrlError("finish() before reset(): nothing to score")
        path = self.ctx.book.save()
        task_case = self.task.case(self.case)
        if not self.ended_because:
            try:  # through the module, so a test can watch the reward's one call
                check = checker.check_workbook(
                    path,
                    task_case.answer_path,
                    self.task.answer_position,
                    engine=self.config.engine,
                    scoring=self.config.scoring,
                    locale=self.config.locale,
                )
            except (MemoryError, EnvLimitExceeded) as exc:  # a grading over the worker's limits
                self.stop_reason, self.ended_because = EndReason.ENV_LIMIT, _limit_message(exc)
        if self.ended_because:  # refused, or over a limit: scored 0 with the reason
            check = checker.CheckResult(
                False, [Mismatch("", "", None, None, self.ended_because)], [self.ended_because]
            )
        kept = self._keep_output(path, output_path)
        reason = self.stop_reason or (
            EndReason.ANSWERED if final_answer is not None else EndReason.NO_ANSWER
        )
        if check.refused:
            reason = EndReason.WORKBOOK_REFUSED
        result = EpisodeResult(
            reward=1.0 if check.passed else 0.0,
            passed=check.passed,
            mismatches=list(check.mismatches),
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
            stop_reason=reason,
            output_path=str(kept) if kept else None,
            info={
                "task_id": self.task.id,
                "case": self.case,
                "checked_cells": check.checked_cells,
                "check_errors": list(check.errors),
                "duration_s": time.monotonic() - self.started,
                "tool_time_s": {k: sum(v) for k, v in self.tool_time.items()},
                "recalc_s": self.ctx.cache.get("recalc_s", 0.0),
                "sandbox_s": self.ctx.cache.get("sandbox_s", 0.0),
            },
        )
        self.close()
        return result

    def _keep_output(self, path: Path, output_path: str | Path | None) -> Path | None:
        target = Path(output_path) if output_path is not None else self.output_path
        if target is None and self.config.keep_outputs_dir:
            target = Path(self.config.keep_outputs_dir) / self.task.output_name(self.case)
        if target is None:
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        return target

    def close(self) -> None:
        """Remove the episode folder (unless config.keep_workdir); safe to call twice."""
        if self.folder is not None and not self.config.keep_workdir:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
        self.ctx = None

    def __enter__(self) -> SpreadsheetEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- overview ----------------------------------------------------------
    def overview(self) -> str:
        """Sheet names, sizes and the first rows of each sheet (config.overview)."""
        cfg = self.config
        if cfg.overview == "none" or self.ctx is None:
            return ""
        rows = cfg.overview_rows if cfg.overview_rows is not None else (
            3 if cfg.overview == "short" else 10
        )  # fmt: skip
        book = self.ctx.book
        names = book.wb.sheetnames
        lines = [f"Workbook: {len(names)} sheet{'s' if len(names) != 1 else ''}"]
        for name in names[: cfg.overview_max_sheets]:
            n_rows, n_cols = book.dimensions(name)
            if n_rows == 0:
                lines.append(f"Sheet {name!r}: empty")
                continue
            lines.append(
                f"Sheet {name!r}: {n_rows} rows x {n_cols} columns (A1:{column_letter(n_cols)}{n_rows})"
            )
            ws = book.wb[name]
            shown_cols = min(n_cols, 26)
            for r in range(1, min(n_rows, rows + 1) + 1):
                parts = []
                for c in range(1, shown_cols + 1):
                    value = cell_value(ws, r, c)
                    if value is not None:
                        parts.append(f"{column_letter(c)}{r}: {render_value(value, 40)}")
                lines.append("  " + (" | ".join(parts) if parts else f"(row {r} empty)"))
            if n_cols > shown_cols:
                lines.append(f"  [columns after {column_letter(shown_cols)} not shown]")
        if len(names) > cfg.overview_max_sheets:
            lines.append(f"[{len(names) - cfg.overview_max_sheets} more sheets: use list_sheets]")
        return truncate("\n".join(lines), cfg.max_observation_chars)


def _limit_message(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return "the call ran out of memory (the worker's limit is env.worker_memory_mb)"
    return str(exc)


def replay(
    task: Task,
    case: int,
    calls: Sequence[ToolCall | dict[str, Any]],
    config: EnvConfig | None = None,
    output_path: str | Path | None = None,
) -> tuple[EpisodeResult, list[StepResult]]:
    """Run ``calls`` in order on a fresh episode and score it (reference solutions, tests)."""
    with SpreadsheetEnv(config) as env:
        env.reset(task, case)
        steps = []
        for call in calls:
            result = env.step(call)
            steps.append(result)
            if result.truncated:
                break
        return env.finish(output_path=output_path), steps

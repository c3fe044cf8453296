"""Turn finished trajectories into a report: pass@k, SpreadsheetBench soft/hard, breakdowns.

Reports are plain dicts (written as report.json) so that other tools can read
them and so that ``compare`` needs nothing but two files.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from spreadrl.errors import SpreadrlError
from spreadrl.eval.passk import mean_pass_at_k, pass1_interval
from spreadrl.reporting import Reporter, Table
from spreadrl.rollout.types import Trajectory


def _group_by_case(trajs: Iterable[Trajectory]) -> dict[tuple[str, int], list[bool]]:
    cases: dict[tuple[str, int], list[tuple[int, bool]]] = defaultdict(list)
    for t in trajs:
        cases[(t.task_id, t.case)].append((t.sample, t.passed))
    return {key: [p for _, p in sorted(v)] for key, v in sorted(cases.items())}


def _soft_hard(by_case: dict[tuple[str, int], list[bool]]) -> tuple[float, float]:
    """SpreadsheetBench metrics (:func:`spreadrl.env.spreadsheet.checker.soft_hard`) per task,
    averaged over samples, then over tasks."""
    from spreadrl.env.spreadsheet.checker import (
        soft_hard,  # the checker's recalc modules: not with the CLI
    )

    tasks: dict[str, list[list[bool]]] = defaultdict(list)
    for (task_id, _), samples in by_case.items():
        tasks[task_id].append(samples)
    if not tasks:
        return 0.0, 0.0
    soft = hard = 0.0
    for cases in tasks.values():
        n = min(len(s) for s in cases)
        scores = [soft_hard([c[i] for c in cases]) for i in range(n)]  # one per sample
        soft += sum(one for one, _ in scores) / n
        hard += sum(every for _, every in scores) / n
    return soft / len(tasks), hard / len(tasks)


def _breakdown(trajs: Sequence[Trajectory], key: str) -> dict[str, dict[str, float]]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[str(t.metadata.get(key) or "-")].append(t)
    out = {}
    for name, members in sorted(groups.items()):
        by_case = _group_by_case(members)
        mean, half = pass1_interval(list(by_case.values()))
        out[name] = {"pass@1": mean, "ci95": half, "episodes": len(members), "cases": len(by_case)}
    return out


TOO_LONG = "prompt_too_long"


def _too_long(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """The episodes whose first prompt did not fit: how many, their lengths, and the limit."""
    hit = [t for t in trajs if t.stop_reason == TOO_LONG]
    lengths = [int(t.metadata["prompt_tokens"]) for t in hit if "prompt_tokens" in t.metadata]
    limits: dict[str, int] = {}
    for t in hit:
        limits.update(t.metadata.get("prompt_limit") or {})
    if not hit:
        return {}
    return {
        "episodes": len(hit),
        "shortest_prompt": min(lengths, default=None),
        "longest_prompt": max(lengths, default=None),
        "limits": limits,
    }


def no_episode_started(report: dict[str, Any]) -> str | None:
    """Why no episode of an eval reached the model, as one line; None when some did.

    An eval whose prompts are all longer than the model's context (or the prompt
    budget) scores 0% without running the model once: that is a setup error, not
    a measurement.
    """
    if not report.get("episodes") or report.get("episodes_started", 1) > 0:
        return None
    too_long = report.get("prompt_too_long") or {}
    if not too_long:
        return f"no episode started: all {report['episodes']} ended before the first turn"
    lo, hi = too_long.get("shortest_prompt"), too_long.get("longest_prompt")
    sizes = "of unknown length" if lo is None or hi is None else f"{lo:,}-{hi:,} tokens"
    sizes = f"{lo:,} tokens" if lo is not None and lo == hi else sizes
    limits = " and ".join(f"{v:,} ({k})" for k, v in too_long.get("limits", {}).items())
    return (
        f"no episode started: every prompt ({too_long['episodes']} episodes, {sizes}) "
        f"is longer than {limits or 'the limit'}; shorten the prompt (the recipe the model "
        "was trained with: --config RECIPE, a smaller env.tools preset, env.overview=none) "
        "or use a model with a longer context"
    )


def some_did_not_start(report: dict[str, Any]) -> str | None:
    """A warning when some (not all) episodes never reached the model; None otherwise.

    Those episodes count as failures in pass@1: the figure is the model's on the
    prompts that fit, diluted by the ones that did not.
    """
    too_long = report.get("prompt_too_long") or {}
    hit = too_long.get("episodes", 0)
    if not hit or hit >= report.get("episodes", 0):
        return None
    limits = " and ".join(f"{v:,} ({k})" for k, v in too_long.get("limits", {}).items())
    return (
        f"{hit} of {report['episodes']} episodes did not start: their prompt is longer than "
        f"{limits or 'the limit'}; they count as failures in pass@1"
    )


MAX_ERRORS = 50
"""Episode errors listed in a report (all are counted in ``episode_errors``)."""


def build_report(
    trajs: Sequence[Trajectory], k_values: Sequence[int] = (1,), extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every figure ``spreadrl eval`` prints, as a JSON-ready dict."""
    by_case = _group_by_case(trajs)
    samples = min((len(v) for v in by_case.values()), default=0)
    pass1, half = pass1_interval(list(by_case.values()))
    soft, hard = _soft_hard(by_case)
    calls = sum(t.tool_calls for t in trajs)
    n = max(len(trajs), 1)
    report: dict[str, Any] = {
        "episodes": len(trajs),
        "cases": len(by_case),
        "tasks": len({t.task_id for t in trajs}),
        "samples_per_case": samples,
        "pass@1": pass1,
        "pass@1_ci95": half,
        "pass@k": {
            str(k): mean_pass_at_k(list(by_case.values()), k) for k in k_values if 0 < k <= samples
        },
        "soft": soft,
        "hard": hard,
        "by_instruction_type": _breakdown(trajs, "instruction_type"),
        "by_family": _breakdown(trajs, "family"),
        "by_difficulty": _breakdown(trajs, "difficulty"),
        "mean_turns": sum(t.turns for t in trajs) / n,
        "mean_tool_calls": calls / n,
        "mean_generated_tokens": sum(t.generated_tokens for t in trajs) / n,
        "tool_error_rate": (sum(t.tool_errors for t in trajs) / calls) if calls else 0.0,
        "parse_errors_per_episode": sum(t.parse_errors for t in trajs) / n,
        "episode_errors": sum(1 for t in trajs if t.error),
        # which episodes failed and why (a task that did not load, a crashed worker):
        # an eval with errors did not measure the model on those cases
        "errors": [{"episode": t.key, "error": t.error} for t in trajs if t.error][:MAX_ERRORS],
        "stop_reasons": dict(Counter(t.stop_reason for t in trajs).most_common()),
        # an episode whose prompt did not fit never reached the model: it measured nothing
        "episodes_started": sum(1 for t in trajs if t.stop_reason != TOO_LONG and not t.error),
        "prompt_too_long": _too_long(trajs),
        "per_case": {f"{tid}/{case}": sum(v) / len(v) for (tid, case), v in by_case.items()},
    }
    if extra:
        report.update(extra)
    return report


def render_report(report: dict[str, Any], reporter: Reporter, title: str = "Evaluation") -> None:
    """The summary table, the first errors, then the breakdowns, told to ``reporter``
    (the CLI draws them as rich tables)."""
    reporter.table(summary_table(report, title))
    for item in report.get("errors", [])[:5]:
        reporter.line(f"  error in {item['episode']}: {item['error']}")
    for table in breakdown_tables(report):
        reporter.table(table)


def summary_table(report: dict[str, Any], title: str) -> Table:
    """One row per headline figure; the episode-error count, when not zero, as an alert."""
    table = Table(title, ("metric", "value"), justify=("left", "right"))
    table.add_row(
        "episodes (cases x samples)",
        f"{report['episodes']} ({report['cases']} x {report['samples_per_case']})",
    )
    table.add_row("pass@1", f"{100 * report['pass@1']:.1f}% ± {100 * report['pass@1_ci95']:.1f}")
    table.add_row("scoring", report_scoring(report))
    for k, v in report["pass@k"].items():
        if k != "1":
            table.add_row(f"pass@{k}", f"{100 * v:.1f}%")
    table.add_row("soft / hard", f"{100 * report['soft']:.1f}% / {100 * report['hard']:.1f}%")
    table.add_row(
        "mean turns / tool calls", f"{report['mean_turns']:.2f} / {report['mean_tool_calls']:.2f}"
    )
    table.add_row("mean generated tokens", f"{report['mean_generated_tokens']:.1f}")
    table.add_row("tool error rate", f"{100 * report['tool_error_rate']:.1f}%")
    table.add_row("parse errors / episode", f"{report['parse_errors_per_episode']:.2f}")
    table.add_row("stop reasons", ", ".join(f"{k} {v}" for k, v in report["stop_reasons"].items()))
    if "wall_s" in report:
        runs = len(report.get("wall_s_sessions") or [])
        shown = f" ({runs} sessions: a resumed eval)" if runs > 1 else ""
        table.add_row("wall time", f"{report['wall_s']:.1f} s{shown}")
    if report.get("episode_errors"):
        table.add_row("episode errors", str(report["episode_errors"]), alert=True)
    return table


def breakdown_tables(report: dict[str, Any]) -> list[Table]:
    """pass@1 by instruction type, family and difficulty: each that has more than one row."""
    tables = []
    for key, label in (
        ("by_instruction_type", "instruction type"),
        ("by_family", "family"),
        ("by_difficulty", "difficulty"),
    ):
        rows = report.get(key) or {}
        if len(rows) <= 1:
            continue
        figures = ("left", "right", "right")
        sub = Table(f"pass@1 by {label}", (label, "episodes", "pass@1"), justify=figures)
        for name, row in rows.items():
            sub.add_row(name, str(row["episodes"]), f"{100 * row['pass@1']:.1f}%")
        tables.append(sub)
    return tables


COMPARED = ("pass@1", "soft", "hard", "mean_turns", "mean_tool_calls", "tool_error_rate")


def load_report(path: Path) -> dict[str, Any]:
    """An eval report from ``path`` (a run folder or its report.json), checked to be one.

    Raises a one-line SpreadrlError naming the file for anything else (not
    JSON, not an object, no ``pass@1`` or ``per_case``), so ``eval compare``
    never prints a table of blanks for a file that is not a report.
    """
    file = path / "report.json" if path.is_dir() else path
    if not file.is_file():
        raise SpreadrlError(f"{file}: no report.json (run `spreadrl eval --out {path}` first)")
    try:
        report = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpreadrlError(f"{file}: not a JSON eval report ({exc})") from exc
    if not isinstance(report, dict):
        raise SpreadrlError(
            f"{file}: not an eval report (a JSON {type(report).__name__}, expected an object)"
        )
    missing = [k for k in ("pass@1", "per_case") if k not in report]
    if missing:
        raise SpreadrlError(
            f"{file}: not an eval report (no {' or '.join(repr(k) for k in missing)}; "
            "`spreadrl eval --out RUN` writes one)"
        )
    per_case = report["per_case"]
    if not isinstance(per_case, dict) or not all(_is_number(v) for v in per_case.values()):
        raise SpreadrlError(f"{file}: 'per_case' must be an object of case -> pass rate")
    for key in COMPARED:
        value = report.get(key)
        if value is not None and not _is_number(value):
            raise SpreadrlError(f"{file}: {key!r} must be a number, got {value!r}")
    return report


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def report_scoring(report: dict[str, Any]) -> str:
    """How a report's outputs were scored; a report from before ``scoring`` was hybrid."""
    return str(report.get("scoring") or "hybrid")

"""Two eval reports side by side: what they share, and the paired change with its interval.

A pass@1 difference means something only over the cases both runs evaluated. Two
reports of different task sets used to print "improved 0, regressed 0" as if the
runs had agreed case for case; here the shared cases are counted, the
task sets named, and a report pair that shares no case gets no delta at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spreadrl.errors import SpreadrlError
from spreadrl.eval.report import report_scoring

COMPARED = ("pass@1", "soft", "hard", "mean_turns", "mean_tool_calls", "tool_error_rate")


@dataclass
class Comparison:
    """What ``spreadrl eval compare`` prints."""

    metrics: dict[str, tuple[Any, Any]]
    shared: int
    only_a: list[str]
    only_b: list[str]
    improved: list[str] = field(default_factory=list)
    regressed: list[str] = field(default_factory=list)
    delta: float | None = None
    delta_ci95: float | None = None
    scoring: tuple[str, str] = ("hybrid", "hybrid")

    def warning(self, a: str, b: str) -> str | None:
        """A sentence when the two runs did not evaluate the same cases, else None."""
        if not self.shared:
            return (
                f"{a} and {b} share no case ({len(self.only_a)} and {len(self.only_b)} cases): "
                "they evaluated different tasks, so no change is measured"
            )
        if self.only_a or self.only_b:
            return (
                f"{a} and {b} share {self.shared} cases only ({len(self.only_a)} only in {a}, "
                f"{len(self.only_b)} only in {b}): the change is over the shared cases"
            )
        return None


def paired_delta(before: dict[str, float], after: dict[str, float]) -> tuple[float, float, int]:
    """Mean per-case change in pass@1 over the shared cases, its ~95% half-width, and n.

    The half-width is NaN with fewer than two shared cases (no spread to measure)."""
    keys = sorted(set(before) & set(after))
    diffs = [after[k] - before[k] for k in keys]
    if len(diffs) < 2:
        return (diffs[0] if diffs else 0.0), float("nan"), len(diffs)
    mean = sum(diffs) / len(diffs)
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return mean, 1.96 * math.sqrt(var / len(diffs)), len(diffs)


def compare(a: dict[str, Any], b: dict[str, Any], *, mixed_scoring: bool = False) -> Comparison:
    """Compare two loaded reports (see :func:`spreadrl.eval.report.load_report`).

    Two reports scored two ways (the hybrid reward vs SpreadsheetBench's own scoring,
    docs/checker.md) measure different things: a case can flip with no change in the
    model. That raises SpreadrlError unless ``mixed_scoring``.
    """
    scoring = (report_scoring(a), report_scoring(b))
    if scoring[0] != scoring[1] and not mixed_scoring:
        raise SpreadrlError(
            f"the reports were scored two ways ({scoring[0]} vs {scoring[1]}): their pass "
            "rates differ by scoring, not only by model; rerun one with --scoring "
            f"{scoring[0]}, or pass --mixed-scoring to compare them anyway"
        )
    ca, cb = a.get("per_case", {}), b.get("per_case", {})
    common = sorted(set(ca) & set(cb))
    out = Comparison(
        metrics={k: (a.get(k), b.get(k)) for k in COMPARED},
        shared=len(common),
        only_a=sorted(set(ca) - set(cb)),
        only_b=sorted(set(cb) - set(ca)),
        improved=[c for c in common if cb[c] > ca[c]],
        regressed=[c for c in common if cb[c] < ca[c]],
        scoring=scoring,
    )
    if common:
        out.delta, out.delta_ci95, _ = paired_delta(ca, cb)
    return out


def task_set_of(run: Path) -> str:
    """The task set an eval ran on, from its config.yaml ("?" when it does not say)."""
    config = (run if run.is_dir() else run.parent) / "config.yaml"
    try:
        data = yaml.safe_load(config.read_text())
        return str(data["eval"]["tasks"])
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        return "?"

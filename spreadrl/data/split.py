"""Deterministic train/val/test splits with no near-duplicate leakage.

Near-duplicate instructions (the similarity of :mod:`spreadrl.data.filters`'
dedup) are clustered first, transitively, and every cluster goes whole to one
split: a paraphrase of a test task never sits in train. Clusters are shuffled
with the seed, larger ones placed first, each into the split furthest below its
target size, so the sizes track the ratios as closely as whole clusters allow.
Same set, ratios, threshold and seed: same splits.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spreadrl.data.filters import near_duplicate_clusters
from spreadrl.data.importers import copy_tasks
from spreadrl.data.importers.common import check_paths
from spreadrl.data.task import TaskSet, foreign_to_task_set
from spreadrl.errors import SpreadrlError

SPLIT_NAMES = ("train", "val", "test")
SUMMARY_NAME = "split_summary.json"


@dataclass
class SplitReport:
    """Task ids per split, the clusters that forced tasks together, and where they were written."""

    seed: int
    ratios: tuple[float, ...]
    threshold: float
    splits: dict[str, list[str]] = field(default_factory=dict)
    clusters: list[list[str]] = field(default_factory=list)  # only those with 2+ tasks
    out: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "ratios": list(self.ratios),
            "dedup_threshold": self.threshold,
            "counts": {name: len(ids) for name, ids in self.splits.items()},
            "near_duplicate_clusters": self.clusters,
            "splits": self.splits,
        }


def parse_ratios(text: str, names: Sequence[str] = SPLIT_NAMES) -> tuple[float, ...]:
    """``"0.8,0.1,0.1"`` -> (0.8, 0.1, 0.1); one ratio per split name, summing to 1."""
    try:
        ratios = tuple(float(part) for part in text.split(","))
    except ValueError as exc:
        raise SpreadrlError(f"--ratios {text!r}: expected numbers like 0.8,0.1,0.1") from exc
    if len(ratios) != len(names):
        raise SpreadrlError(f"--ratios {text!r}: need {len(names)} values ({', '.join(names)})")
    if any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
        raise SpreadrlError(f"--ratios {text!r}: values must be >= 0 and sum to 1")
    return ratios


def assign_clusters(
    clusters: list[list[int]], ratios: Sequence[float], seed: int
) -> list[list[int]]:
    """Member indices per split: clusters whole, larger first, into the most-behind split."""
    total = sum(len(c) for c in clusters)
    targets = [r * total for r in ratios]
    order = list(range(len(clusters)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: -len(clusters[i]))  # stable: shuffled within a size
    sizes = [0] * len(ratios)
    out: list[list[int]] = [[] for _ in ratios]
    for i in order:
        open_splits = [s for s, target in enumerate(targets) if target > 0]
        best = max(open_splits, key=lambda s: (targets[s] - sizes[s], -s))
        out[best].extend(clusters[i])
        sizes[best] += len(clusters[i])
    return [sorted(members) for members in out]


def _foreign(out: Path, names: Sequence[str]) -> str | None:
    """What in ``out`` no split wrote (one task set per split name, and the summary)."""
    strays = sorted(p.name for p in out.iterdir() if p.name not in {*names, SUMMARY_NAME})
    if strays:
        return f"entries no split of ours holds ({', '.join(strays[:4])})"
    for name in names:
        if (out / name).is_dir() and any((out / name).iterdir()):
            foreign = foreign_to_task_set(out / name)
            if foreign is not None:
                return f"{name}/ with {foreign}"
    return None


def split_tasks(
    task_set: TaskSet,
    out: Path | None,
    *,
    ratios: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    threshold: float = 0.9,
    names: Sequence[str] = SPLIT_NAMES,
    overwrite: bool = False,
) -> SplitReport:
    """Split ``task_set``; with ``out``, write ``out/<name>/`` native-layout sets and a summary."""
    if len(ratios) != len(names):
        raise SpreadrlError(f"need one ratio per split ({', '.join(names)}), got {list(ratios)}")
    if not 0.0 < threshold <= 1.0:
        raise SpreadrlError(f"--dedup-threshold {threshold}: expected a value in (0, 1]")
    if not len(task_set):
        raise SpreadrlError(f"{task_set.root}: no tasks to split")
    out = Path(out) if out is not None else None
    if out is not None:
        check_paths(
            task_set.root, out, overwrite=overwrite, written_by=lambda o: _foreign(o, names)
        )
    tasks = sorted(task_set.tasks, key=lambda t: t.id)  # order-independent result
    clusters = near_duplicate_clusters([t.instruction for t in tasks], threshold)
    assigned = assign_clusters(clusters, ratios, seed)
    report = SplitReport(seed=seed, ratios=tuple(ratios), threshold=threshold)
    report.clusters = [[tasks[i].id for i in c] for c in clusters if len(c) > 1]
    for name, members in zip(names, assigned, strict=True):
        report.splits[name] = [tasks[i].id for i in members]
    if out is None:
        return report
    import os
    import shutil

    # Written beside ``out`` and swapped in at the end: a failure leaves ``out`` as it was.
    staging = out.parent / f".{out.name}.splitting-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        by_id = {t.id: t for t in tasks}
        for name in names:
            chosen = [by_id[i] for i in report.splits[name]]
            copy_tasks(TaskSet(root=task_set.root, tasks=chosen), staging / name)
        (staging / SUMMARY_NAME).write_text(json.dumps(report.to_json(), indent=2))
        if out.exists():
            old = out.parent / f".{out.name}.replaced-{os.getpid()}"
            out.rename(old)
            staging.rename(out)
            shutil.rmtree(old)
        else:
            staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    report.out = out
    return report

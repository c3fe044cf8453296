"""The built-in task suite: fixed synthesized splits, built once and cached.

``builtin_tasks("train")`` synthesizes the split deterministically the first
time (into a temporary folder renamed into place, so a crash never leaves a
half-built suite) and afterwards loads it from the cache:
``$SPREADRL_CACHE/builtin/<version>/<split>``, or
``~/.cache/spreadrl/builtin/<version>/<split>`` when SPREADRL_CACHE is unset.
Bump :data:`BUILTIN_VERSION` whenever a family or a split definition changes.

The splits are written without the synthesizer's self-check, which grades with
env's checker (data never imports env); generation is deterministic, so
tests/data/test_builtin.py checks every split's cases with that checker instead.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spreadrl.data.synth import synthesize
from spreadrl.data.task import TaskSet, load_tasks
from spreadrl.errors import SpreadrlError

log = logging.getLogger(__name__)

BUILTIN_VERSION = "v1"
DEMO_FAMILIES = ("column_sum", "column_average", "column_extreme", "column_count")

TRAIN_SIZE = 256
TEST_SIZE = 64
DEMO_TRAIN_SIZE = 256
DEMO_TEST_SIZE = 64


@dataclass(frozen=True)
class BuiltinSplit:
    """How one split is synthesized; seeds differ between splits so data never repeats."""

    n: int
    seed: int
    families: tuple[str, ...] | None = None
    difficulty: tuple[str, ...] | None = None
    cases: int | None = None


SPLITS: dict[str, BuiltinSplit] = {
    "train": BuiltinSplit(TRAIN_SIZE, seed=1_000),
    "test": BuiltinSplit(TEST_SIZE, seed=2_000),
    "demo-train": BuiltinSplit(DEMO_TRAIN_SIZE, 3_000, DEMO_FAMILIES, ("easy",), cases=1),
    "demo-test": BuiltinSplit(DEMO_TEST_SIZE, 4_000, DEMO_FAMILIES, ("easy",), cases=1),
}


def cache_root() -> Path:
    """Where built-in suites live: $SPREADRL_CACHE/builtin or ~/.cache/spreadrl/builtin."""
    base = os.environ.get("SPREADRL_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "spreadrl") / "builtin"


def builtin_tasks(split: str = "train", root: Path | None = None) -> TaskSet:
    """The built-in ``split`` (train, test, demo-train, demo-test), built on first use.

    ``root`` replaces the cache folder (``<root>/<version>/<split>``).
    """
    if split not in SPLITS:
        raise SpreadrlError(f"unknown built-in split {split!r}; allowed: {', '.join(SPLITS)}")
    folder = Path(root or cache_root()) / BUILTIN_VERSION / split
    if (folder / "dataset.json").is_file():
        return load_tasks(folder)
    _build(split, folder)
    return load_tasks(folder)


def _build(split: str, folder: Path) -> None:
    spec = SPLITS[split]
    folder.parent.mkdir(parents=True, exist_ok=True)
    log.info("building built-in split %s (%d tasks) in %s", split, spec.n, folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{split}-", dir=folder.parent))
    try:
        synthesize(
            tmp / "set",
            spec.n,
            spec.seed,
            families=spec.families,
            difficulty=spec.difficulty,
            cases=spec.cases,
            id_prefix=split,
        )
        try:
            (tmp / "set").rename(folder)
        except OSError:
            if not (folder / "dataset.json").is_file():  # not a concurrent build that won
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""The built-in suite: built once, reused from the cache, splits disjoint."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from spreadrl.data import builtin
from spreadrl.data.builtin import BuiltinSplit, builtin_tasks
from spreadrl.env.spreadsheet.case_check import verify_case
from spreadrl.errors import SpreadrlError


@pytest.fixture
def small_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real split definitions at a size a test can afford."""
    small = {
        name: BuiltinSplit(6, s.seed, s.families, s.difficulty, s.cases)
        for name, s in builtin.SPLITS.items()
    }
    monkeypatch.setattr(builtin, "SPLITS", small)


def _digests(tasks) -> set[str]:
    return {hashlib.sha256(c.input_path.read_bytes()).hexdigest() for t in tasks for c in t.cases}


def test_second_call_reuses_the_cache(tmp_path: Path, small_splits: None) -> None:
    first = builtin_tasks("test", root=tmp_path)
    mtimes = {p: p.stat().st_mtime_ns for p in first.root.rglob("*")}
    second = builtin_tasks("test", root=tmp_path)
    assert second.root == first.root == tmp_path / builtin.BUILTIN_VERSION / "test"
    assert {p: p.stat().st_mtime_ns for p in second.root.rglob("*")} == mtimes
    assert [t.id for t in second] == [t.id for t in first]
    assert not [p for p in first.root.parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_cache_env_variable(tmp_path: Path, small_splits: None, monkeypatch) -> None:
    monkeypatch.setenv("SPREADRL_CACHE", str(tmp_path))
    tasks = builtin_tasks("demo-test")
    assert tasks.root == tmp_path / "builtin" / builtin.BUILTIN_VERSION / "demo-test"


def test_splits_are_disjoint(tmp_path: Path, small_splits: None) -> None:
    train, test = builtin_tasks("train", root=tmp_path), builtin_tasks("test", root=tmp_path)
    assert not {t.id for t in train} & {t.id for t in test}
    assert not _digests(train) & _digests(test)
    demo_train = builtin_tasks("demo-train", root=tmp_path)
    demo_test = builtin_tasks("demo-test", root=tmp_path)
    assert not _digests(demo_train) & _digests(demo_test)
    for task in [*demo_train, *demo_test]:
        assert task.difficulty == "easy" and task.family in builtin.DEMO_FAMILIES
        assert len(task.cases) == 1


@pytest.mark.parametrize("split", sorted(builtin.SPLITS))
def test_every_case_of_every_split_passes_the_synthesizer_self_check(split: str) -> None:
    """The splits are built unchecked (data cannot import env's checker), so every case
    users get is checked here instead, in the cache folder they get it from: its
    expected workbook must grade as correct against its own reference solution."""
    tasks = builtin_tasks(split)
    assert len(tasks) == builtin.SPLITS[split].n
    for task in tasks:
        for case in task.cases:
            problems = verify_case(
                case.input_path, case.answer_path, task.answer_position, case.load_solution()
            )
            assert problems == [], f"{split} {task.id} case {case.index}: {problems}"


def test_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(SpreadrlError, match="demo-train"):
        builtin_tasks("validation", root=tmp_path)

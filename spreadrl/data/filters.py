"""Composable filters over a task set, each saying what it removed and why.

A filter has a ``name`` and ``check(task) -> str | None``: None keeps the task,
a string is the reason to drop it. :func:`apply_filters` runs them in order
(a task's first reason removes it, so later filters never see it), counts
removals per filter, and can write the kept tasks as a new native-layout set.

Why these filters: public spreadsheet sets contain tasks whose
workbooks do not open, whose answer cells already hold the answer (a no-op
passes), whose answers only Excel computes (our engine cannot reproduce the
reward), near-duplicate instructions, prompts too long for the model, and, for
RL, tasks a model always or never solves (all-equal groups give zero advantage).

Dedup runs last in :func:`default_order` so that the copy it keeps is one the
other filters kept. The two filters that grade a task with the reward's
checker and recalculation (``structure``, ``reproducible``) live with them in
:mod:`spreadrl.env.spreadsheet.task_filters`: data does not import the environment.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spreadrl.data.importers import copy_tasks
from spreadrl.data.importers.common import check_paths
from spreadrl.data.task import Task, TaskSet, foreign_to_task_set
from spreadrl.errors import SpreadrlError
from spreadrl.reporting import LogReporter, Reporter

log = logging.getLogger(__name__)

REPORT_NAME = "filter_report.json"


def _foreign(out: Path) -> str | None:
    """What in ``out`` no filter wrote (a filtered set is a task set and its report)."""
    return foreign_to_task_set(out, (REPORT_NAME,))


class Filter(Protocol):
    """A named check: ``check(task)`` returns None to keep, or the reason to drop."""

    name: str

    def check(self, task: Task) -> str | None: ...


@dataclass
class FilterReport:
    """Kept ids, removed ids with reasons, and how many each filter removed."""

    total: int
    kept: list[str] = field(default_factory=list)
    removed: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    out: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "kept": len(self.kept),
            "removed": len(self.removed),
            "counts": self.counts,
            "kept_ids": self.kept,
            "removed_ids": self.removed,
        }


# ---------------------------------------------------------------- near-duplicates

_WORD = re.compile(r"\w+")


def normalize_instruction(text: str) -> str:
    """Lowercased words (NFKC, punctuation and spacing dropped): what 'same text' means."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def shingles(text: str, n: int = 3) -> frozenset[str]:
    """Word n-grams of the normalised text (the whole text when shorter than n words)."""
    words = normalize_instruction(text).split()
    if len(words) < n:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def near_duplicate_pairs(
    texts: Sequence[str], threshold: float, *, n: int = 3, common: int = 200
) -> Iterable[tuple[int, int, float]]:
    """(i, j, similarity) with i < j for every pair at or above ``threshold`` (Jaccard of shingles).

    Candidates come from an inverted index of shingles, so unrelated pairs are
    never compared; shingles shared by more than ``common`` texts ("in column
    a") are not used to find candidates (near-duplicates share rarer ones too).
    """
    sets = [shingles(text, n) for text in texts]
    index: dict[str, list[int]] = defaultdict(list)
    for i, grams in enumerate(sets):
        for gram in grams:
            index[gram].append(i)
    for i, grams in enumerate(sets):
        candidates: set[int] = set()
        for gram in grams:
            holders = index[gram]
            if len(holders) <= common:
                candidates.update(j for j in holders if j > i)
        for j in sorted(candidates):
            similarity = jaccard(grams, sets[j])
            if similarity >= threshold:
                yield i, j, similarity


def near_duplicate_clusters(texts: Sequence[str], threshold: float) -> list[list[int]]:
    """Indices grouped by near-duplicate links (transitively), each cluster sorted, in first-index order."""
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j, _ in near_duplicate_pairs(texts, threshold):
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(len(texts)):
        groups[root(i)].append(i)
    return sorted(groups.values(), key=lambda group: group[0])


class DedupFilter:
    """Keeps the first task of each group of near-identical instructions.

    Similarity is the Jaccard index of word 3-grams of the normalised
    instruction; ``threshold`` 1.0 drops only exact (normalised) duplicates.
    Stateful: tasks are remembered in the order they are checked and kept.
    """

    name = "dedup"

    def __init__(self, threshold: float = 0.9) -> None:
        if not 0.0 < threshold <= 1.0:
            raise SpreadrlError(f"--dedup-threshold {threshold}: expected a value in (0, 1]")
        self.threshold = threshold
        self._seen: list[tuple[str, frozenset[str]]] = []
        self._index: dict[str, list[int]] = defaultdict(list)

    def check(self, task: Task) -> str | None:
        grams = shingles(task.instruction)
        candidates = {i for gram in grams for i in self._index.get(gram, ())}
        for i in sorted(candidates):
            other_id, other = self._seen[i]
            similarity = jaccard(grams, other)
            if similarity >= self.threshold:
                return (
                    f"near-duplicate of task {other_id!r} (instruction similarity {similarity:.2f})"
                )
        position = len(self._seen)
        self._seen.append((task.id, grams))
        for gram in grams:
            self._index[gram].append(position)
        return None


# ---------------------------------------------------------------- prompt length


class PromptTokenizer(Protocol):
    """What the prompt-length filter needs of a tokenizer (a transformers tokenizer has it).

    A Protocol rather than ``PreTrainedTokenizerBase`` so data, the lowest package,
    does not import transformers to name a type.
    """

    chat_template: str | None

    def apply_chat_template(
        self, conversation: list[dict[str, str]], *, add_generation_prompt: bool, tokenize: bool
    ) -> str: ...

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]: ...


class PromptLengthFilter:
    """Drops tasks whose prompt is longer than ``max_tokens`` under the model's tokenizer.

    The prompt is the instruction as a user turn, rendered with the tokenizer's
    chat template when it has one (``render`` overrides this, e.g. to add the
    environment's system prompt and tool schemas).
    """

    name = "prompt-length"

    def __init__(
        self,
        tokenizer: PromptTokenizer,
        max_tokens: int,
        render: Callable[[Task], str] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.render = render

    def count(self, task: Task) -> int:
        if self.render is not None:
            text = self.render(task)
        elif getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": task.instruction}]
            text = self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        else:
            text = task.instruction
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def check(self, task: Task) -> str | None:
        tokens = self.count(task)
        if tokens > self.max_tokens:
            return f"prompt is {tokens} tokens, over --max-prompt-tokens {self.max_tokens}"
        return None


def load_tokenizer(path: Path) -> PromptTokenizer:
    """AutoTokenizer from a local folder (never the network), with a clear error."""
    from transformers import AutoTokenizer

    if not Path(path).is_dir():
        raise SpreadrlError(f"--tokenizer {path}: not a folder with a tokenizer")
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        reason = " ".join(str(exc).split())  # transformers' messages span lines
        raise SpreadrlError(f"--tokenizer {path}: cannot load a tokenizer ({reason})") from exc


# ---------------------------------------------------------------- pass rate


def load_pass_rates(run_dir: Path) -> dict[str, tuple[int, int]]:
    """task id -> (passed samples, samples) from an eval run's trajectories.jsonl.

    Every case and sample of a task counts, so K samples of a 3-case task are
    3K trials. A torn last line (an interrupted run) is ignored.
    """
    path = Path(run_dir)
    file = path / "trajectories.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise SpreadrlError(f"--pass-rates {run_dir}: no trajectories.jsonl (run `spreadrl eval`)")
    passed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    try:
        text = file.read_text()
    except UnicodeDecodeError as exc:
        raise SpreadrlError(f"--pass-rates {run_dir}: not an eval's trajectories (binary)") from exc
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            task_id = str(row["task_id"])
        except (json.JSONDecodeError, KeyError, TypeError):
            log.warning("%s line %d: not a trajectory row, ignored", file, number)
            continue
        total[task_id] += 1
        passed[task_id] += bool(row.get("passed"))
    if not total:
        raise SpreadrlError(f"{file}: holds no trajectories")
    return {task_id: (passed[task_id], total[task_id]) for task_id in total}


class PassRateFilter:
    """Keeps tasks whose pass rate over K samples lies in [min_pass, max_pass].

    RL groups whose rollouts all pass or all fail have zero advantage and teach
    nothing; tasks the run never sampled are dropped too (their rate is unknown).
    """

    name = "pass-rate"

    def __init__(
        self, rates: dict[str, tuple[int, int]], min_pass: float = 0.0, max_pass: float = 1.0
    ) -> None:
        if not 0.0 <= min_pass <= max_pass <= 1.0:
            raise SpreadrlError(
                f"--min-pass {min_pass} / --max-pass {max_pass}: need 0 <= min <= max <= 1"
            )
        self.rates = rates
        self.min_pass = min_pass
        self.max_pass = max_pass

    def check(self, task: Task) -> str | None:
        if task.id not in self.rates:
            return "no samples of this task in the eval run"
        passed, total = self.rates[task.id]
        rate = passed / total
        if rate < self.min_pass:
            return f"pass rate {rate:.2f} ({passed}/{total}) below --min-pass {self.min_pass}"
        if rate > self.max_pass:
            return f"pass rate {rate:.2f} ({passed}/{total}) above --max-pass {self.max_pass}"
        return None


# ---------------------------------------------------------------- applying


def default_order(filters: Iterable[Filter]) -> list[Filter]:
    """Cheap and per-task filters first, dedup last (it must only remember kept tasks)."""
    rank = {"structure": 0, "prompt-length": 1, "pass-rate": 2, "reproducible": 3, "dedup": 9}
    return sorted(filters, key=lambda f: rank.get(f.name, 5))


def apply_filters(
    task_set: TaskSet,
    filters: Sequence[Filter],
    out: Path | None = None,
    *,
    overwrite: bool = False,
    reporter: Reporter | None = None,
) -> FilterReport:
    """Run ``filters`` in order over ``task_set``; with ``out``, write the kept tasks there.

    The written set is a copy (task folders and a new dataset.json, plus
    ``filter_report.json``); a non-empty ``out`` is refused unless ``overwrite``.
    Tasks that ``load_tasks(..., skip_bad=True)`` could not read (``task_set.problems``)
    are reported as removed by ``load``. Each removed task carries the first reason
    found (later filters do not run on it). ``reporter`` shows the progress (default: none).
    """
    if out is not None:
        check_paths(task_set.root, Path(out), overwrite=overwrite, written_by=_foreign)
    report = FilterReport(
        total=len(task_set) + len(task_set.problems), counts={f.name: 0 for f in filters}
    )
    # tasks a skip_bad load refused count as removed by their kind: "load", or
    # "empty-position" (an answer_position covering no answer cell: it would check nothing)
    for problem in task_set.problems:
        kind = getattr(problem, "kind", "load")
        report.counts[kind] = report.counts.get(kind, 0) + 1
        report.removed[problem.task_id] = [f"{kind}: {problem.message}"]
    kept: list[Task] = []
    reporter = reporter or LogReporter()
    with reporter.progress("filtering", len(task_set.tasks), keep=False) as bar:
        for task in task_set.tasks:
            if _passes(task, filters, report):
                kept.append(task)
            bar.advance()
    report.kept = [task.id for task in kept]
    if out is not None:
        written = copy_tasks(
            TaskSet(root=task_set.root, tasks=kept), Path(out), overwrite=True, written_by=_foreign
        )
        report.out = written.root
        (written.root / REPORT_NAME).write_text(json.dumps(report.to_json(), indent=2))
    return report


def _passes(task: Task, filters: Sequence[Filter], report: FilterReport) -> bool:
    """Whether ``task`` passes every filter; the first that removes it is recorded."""
    for flt in filters:
        reason = flt.check(task)
        if reason is not None:
            report.removed[task.id] = [f"{flt.name}: {reason}"]
            report.counts[flt.name] += 1
            log.info("drop %s (%s): %s", task.id, flt.name, reason)
            return False
    return True

"""How often do the hybrid reward and ``--scoring spreadsheetbench`` disagree on a task set, and why?

    PYTHONPATH=. python scripts/scoring_disagreement.py TASKS [--outputs DIR]

TASKS is a task folder or ``builtin:<split>``. Every case is scored both ways on up to
three outputs: the folder ``--outputs`` holds (e.g. an oracle eval's ``outputs/``),
the answer itself re-saved by openpyxl (formulas kept, cached values dropped, as an
agent's openpyxl save leaves them), and the unchanged input. Prints the counts and one
reason per disagreeing case (docs/checker.md, "Two scorings").
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from spreadrl.data.sources import resolve_tasks
from spreadrl.env.spreadsheet.checker import CheckResult, check_many


def _resave(answer: Path, target: Path) -> Path:
    import openpyxl

    target.parent.mkdir(parents=True, exist_ok=True)
    openpyxl.load_workbook(answer).save(target)
    return target


def _why(hybrid: CheckResult, sbench: CheckResult) -> str:
    failing = sbench if hybrid.passed else hybrid
    side = "spreadsheetbench fails" if hybrid.passed else "hybrid fails"
    if not failing.mismatches:
        return side
    first = failing.mismatches[0]
    expected, actual = first.expected, first.actual
    if hybrid.passed and expected is None and actual not in (None, ""):
        return f"{side}: the answer holds no cached value there (written by a library)"
    if type(expected).__name__ == type(actual).__name__ == "time":
        return f"{side}: SpreadsheetBench's time rule (str(t)[:-3])"
    kinds = f"{type(expected).__name__} vs {type(actual).__name__}"
    return f"{side}: {first.reason.split('(')[0].strip() or 'differs'} [{kinds}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks")
    parser.add_argument("--outputs", type=Path)
    args = parser.parse_args()
    task_set = resolve_tasks(args.tasks)
    triples: list[tuple[str, Path, Path, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in task_set:
            for case in task.cases:
                label = f"{task.id}/{case.index}"
                if args.outputs is not None:
                    given = args.outputs / task.output_name(case.index)
                    triples.append(
                        (f"{label} output", given, case.answer_path, task.answer_position)
                    )
                saved = _resave(case.answer_path, Path(tmp) / label / "answer.xlsx")
                triples.append((f"{label} answer", saved, case.answer_path, task.answer_position))
                triples.append(
                    (f"{label} input", case.input_path, case.answer_path, task.answer_position)
                )
        plain = [(o, a, p) for _, o, a, p in triples]
        hybrid = check_many(plain)
        sbench = check_many(plain, scoring="spreadsheetbench")
    reasons: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for (label, *_), h, s in zip(triples, hybrid, sbench, strict=True):
        kind = label.rsplit(" ", 1)[1]
        kinds[kind] += 1
        if h.passed != s.passed:
            reasons[f"{kind}: {_why(h, s)}"] += 1
            print(f"  {label}: hybrid {h.passed}, spreadsheetbench {s.passed}")
    total = sum(h.passed != s.passed for h, s in zip(hybrid, sbench, strict=True))
    print(f"{args.tasks}: {len(triples)} outputs scored ({dict(kinds)}); {total} disagree")
    for reason, count in reasons.most_common():
        print(f"  {count:4d}  {reason}")
    passes = (sum(h.passed for h in hybrid), sum(s.passed for s in sbench))
    print(f"  passes: hybrid {passes[0]}, spreadsheetbench {passes[1]}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

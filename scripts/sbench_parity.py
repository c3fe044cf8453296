"""Score seeded workbook pairs with SpreadsheetBench's own code and with spreadrl's, side by side.

SpreadsheetBench's and Harbor's code is run from copies OUTSIDE this repository
(never imported from it, never copied into it):

    git clone https://github.com/RUCKBReasoning/SpreadsheetBench /tmp/sb   # 49b73a9 or newer
    PYTHONPATH=. python scripts/sbench_parity.py --upstream /tmp/sb \
        --harbor /tmp/harbor_evaluate.py --write tests/fixtures/sbench_verdicts.json

``--upstream`` is the checkout (its ``evaluation/evaluation.py`` and
``evaluation/open_spreadsheet.py`` run as they are: the outputs are converted by
``open_all_spreadsheet_in_dir`` with the libreoffice backend, then
``compare_workbooks`` gives each verdict). ``--harbor`` is Harbor's
SpreadsheetBench-Verified ``evaluate.py``, whose ``compare_workbooks`` reads the
answer_position forms upstream's crashes on. Prints the agreement; exits 1 on any
disagreement. ``--write`` records the verdicts for the CI test.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "env" / "spreadsheet"))

from sbench_pairs import HARBOR_FORMS, UPSTREAM_FORMS, make_pairs  # noqa: E402

from spreadrl.env.spreadsheet.sbench import compare_books, sbench_check  # noqa: E402


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _their_verdicts(evaluator, pairs, soffice: str, opener, folder: Path):
    """(raw, converted) verdicts of ``evaluator.compare_workbooks`` on every pair."""
    converted_dir = folder / "converted"
    converted_dir.mkdir()
    for pair in pairs:
        shutil.copyfile(pair.output, converted_dir / pair.output.name)
    with contextlib.redirect_stdout(io.StringIO()):
        opener.open_all_spreadsheet_in_dir(str(converted_dir), "libreoffice", soffice)
    raw, converted = [], []
    for pair in pairs:
        for target, out in ((raw, pair.output), (converted, converted_dir / pair.output.name)):
            with contextlib.redirect_stdout(io.StringIO()):
                try:
                    ok, _ = evaluator.compare_workbooks(
                        str(pair.answer), str(out), "", pair.answer_position
                    )
                except Exception:  # noqa: BLE001 - upstream's own loop counts this a fail
                    ok = False
            target.append(bool(ok))
    return raw, converted


def _our_verdicts(pairs):
    raw = [not compare_books(p.answer, p.output, p.answer_position)[0] for p in pairs]
    results = sbench_check(
        [p.output for p in pairs], [p.answer for p in pairs], [p.answer_position for p in pairs]
    )
    return raw, [not mismatches for mismatches, *_ in results]


def _agree(name: str, theirs: list[bool], ours: list[bool]) -> bool:
    same = sum(a == b for a, b in zip(theirs, ours, strict=True))
    print(f"{name}: {same}/{len(theirs)} agree; passes {sum(theirs)} theirs, {sum(ours)} ours")
    for index, (a, b) in enumerate(zip(theirs, ours, strict=True)):
        if a != b:
            print(f"  pair {index}: theirs {a}, ours {b}")
    return same == len(theirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True)
    parser.add_argument("--harbor", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--harbor-count", type=int, default=60)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--commit", help="the upstream commit, where --upstream is no git checkout")
    parser.add_argument(
        "--cache",
        type=Path,
        help="keep their verdicts here and reuse them (their conversion takes one "
        "soffice start per file: about 3 s each on a busy 2-core machine)",
    )
    parser.add_argument(
        "--labels",
        default="upstream,harbor",
        help="which pair sets to score (run them in two processes with two HOME folders, "
        "so their soffice profiles do not collide; merge the caches)",
    )
    args = parser.parse_args()
    evaluation = _load(args.upstream / "evaluation" / "evaluation.py", "sb_evaluation")
    opener = _load(args.upstream / "evaluation" / "open_spreadsheet.py", "sb_open")
    harbor = _load(args.harbor, "harbor_evaluate")
    soffice = opener.find_libreoffice()
    commit = (
        subprocess.run(
            ["git", "-C", str(args.upstream), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or args.commit
    )
    ok = True
    record: dict = {
        "note": "1 = pass. 'upstream': SpreadsheetBench's evaluation/evaluation.py "
        "compare_workbooks (raw: on the generated output; converted: after its "
        "evaluation/open_spreadsheet.py LibreOffice conversion) at upstream_commit; 'harbor': "
        "Harbor's SpreadsheetBench evaluate.py on the answer_position forms upstream crashes "
        "on. Written by scripts/sbench_parity.py; the pairs are tests/env/spreadsheet/sbench_pairs.py's, "
        "regenerated from seed at test time.",
        "seed": args.seed,
        "upstream_commit": commit,
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for label, evaluator, forms, count in (
            ("upstream", evaluation, UPSTREAM_FORMS, args.count),
            ("harbor", harbor, HARBOR_FORMS, args.harbor_count),
        ):
            if label not in args.labels.split(","):
                continue
            pairs = make_pairs(args.seed, count, root / label / "pairs", forms)
            (root / label / "work").mkdir()
            cached = (
                json.loads(args.cache.read_text()) if args.cache and args.cache.is_file() else {}
            )
            key = f"{label}/{args.seed}/{count}"
            if key not in cached:
                work = root / label / "work"
                cached[key] = _their_verdicts(evaluator, pairs, soffice, opener, work)
                if args.cache:
                    args.cache.write_text(json.dumps(cached))
            raw, converted = cached[key]
            print(f"{label}: their verdicts ready", flush=True)
            our_raw, our_converted = _our_verdicts(pairs)
            ok &= _agree(f"{label} rules only (no conversion)", raw, our_raw)
            ok &= _agree(f"{label} with the LibreOffice conversion", converted, our_converted)
            record[label] = {
                "count": count,
                "forms": list(forms),
                "raw": "".join(str(int(v)) for v in raw),
                "converted": "".join(str(int(v)) for v in converted),
            }
    if args.write:
        args.write.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.write}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""filters: each filter removes what it should, says why, and apply_filters writes a clean copy."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from openpyxl import Workbook

from spreadrl.data.filters import (
    REPORT_NAME,
    DedupFilter,
    PassRateFilter,
    PromptLengthFilter,
    apply_filters,
    default_order,
    load_pass_rates,
    load_tokenizer,
    near_duplicate_clusters,
)
from spreadrl.data.task import CELL_LEVEL, load_tasks
from spreadrl.env.spreadsheet.task_filters import ReproducibleFilter, StructureFilter
from spreadrl.errors import SpreadrlError


def _book(path: Path, a1: object, b1: object = None, *, cached: str | None = None) -> None:
    """A1 and B1; with ``cached`` the B1 formula gets that saved value (as Excel would store)."""
    book = Workbook()
    book.active["A1"] = a1
    if b1 is not None:
        book.active["B1"] = b1
    book.save(path)
    if cached is not None:
        with zipfile.ZipFile(path) as zf:
            parts = {name: zf.read(name) for name in zf.namelist()}
        xml = parts["xl/worksheets/sheet1.xml"].decode()
        xml = re.sub(r'(<c r="B1"><f>.*?</f>)<v ?/>', rf"\1<v>{cached}</v>", xml)
        parts["xl/worksheets/sheet1.xml"] = xml.encode()
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in parts.items():
                zf.writestr(name, data)


def make_set(root: Path, specs: list[dict]) -> Path:
    """Tasks from specs {id, instruction, input: (a1, b1), answer: (a1, b1, cached?)}."""
    entries = []
    for spec in specs:
        folder = root / spec["id"]
        folder.mkdir(parents=True)
        inp = folder / f"1_{spec['id']}_input.xlsx"
        ans = folder / f"1_{spec['id']}_answer.xlsx"
        if spec.get("broken"):
            with zipfile.ZipFile(inp, "w") as zf:  # a zip, but no workbook inside
                zf.writestr("junk.txt", "not a workbook")
        else:
            _book(inp, *spec.get("input", (4,)))
        answer = spec.get("answer", (4, 40))
        _book(ans, answer[0], answer[1], cached=answer[2] if len(answer) > 2 else None)
        entries.append(
            {
                "id": spec["id"],
                "instruction": spec.get(
                    "instruction", f"Multiply A1 by ten into B1 ({spec['id']})."
                ),
                "spreadsheet_path": spec["id"],
                "instruction_type": CELL_LEVEL,
                "answer_position": spec.get("position", "B1"),
            }
        )
    (root / "dataset.json").write_text(json.dumps(entries))
    return root


def test_structure_filter_finds_unreadable_books_and_trivial_cases(tmp_path):
    root = make_set(
        tmp_path / "set",
        [
            {"id": "good"},
            {"id": "broken", "broken": True},
            {"id": "noop", "input": (4, 40)},
        ],
    )
    flt = StructureFilter()
    tasks = load_tasks(root)
    assert flt.check(tasks.get("good")) is None
    assert "does not open" in flt.check(tasks.get("broken"))
    assert "doing nothing passes" in flt.check(tasks.get("noop"))


def test_reproducible_filter_flags_excel_only_and_disagreeing_formulas(tmp_path):
    root = make_set(
        tmp_path / "set",
        [
            {"id": "plain", "answer": (4, 40)},
            {"id": "formula-ok", "answer": (4, "=A1*10", "40")},
            {"id": "formula-off", "answer": (4, "=A1*10", "41")},
            {"id": "excel-only", "answer": (4, '=WEBSERVICE("http://x")', "40")},
        ],
    )
    flt = ReproducibleFilter()
    tasks = load_tasks(root)
    assert flt.check(tasks.get("plain")) is None
    assert flt.check(tasks.get("formula-ok")) is None
    off = flt.check(tasks.get("formula-off"))
    assert "Sheet!B1" in off and "saved 41" in off and "recalculated 40" in off
    assert "only Excel computes it" in flt.check(tasks.get("excel-only"))


def test_dedup_keeps_the_first_of_near_identical_instructions():
    texts = [
        "Sum the sales in column B for each region and put totals in column D.",
        "sum the Sales in column B for each region, and put totals in column D!",
        "Sum the sales in column B for each region and put the totals in column D.",
        "Highlight duplicate customer names in the list.",
    ]
    assert near_duplicate_clusters(texts, 0.6) == [[0, 1, 2], [3]]
    assert near_duplicate_clusters(texts, 1.0) == [[0, 1], [2], [3]]

    class T:
        def __init__(self, i: int) -> None:
            self.id, self.instruction = f"t{i}", texts[i]

    flt = DedupFilter(threshold=0.6)
    reasons = [flt.check(T(i)) for i in range(4)]
    assert reasons[0] is None and reasons[3] is None
    assert reasons[1] == "near-duplicate of task 't0' (instruction similarity 1.00)"
    assert reasons[2].startswith("near-duplicate of task 't0'")
    with pytest.raises(SpreadrlError, match="dedup-threshold"):
        DedupFilter(threshold=0)


def _tokenizer_dir(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(["a", "b", "c", "d", "e", "f", "g"])}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "tok"
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(folder)
    return folder


def test_prompt_length_counts_tokens_of_a_local_tokenizer(tmp_path):
    root = make_set(
        tmp_path / "set",
        [{"id": "short", "instruction": "a b c"}, {"id": "long", "instruction": "a b c d e f g a"}],
    )
    tokenizer = load_tokenizer(_tokenizer_dir(tmp_path))
    flt = PromptLengthFilter(tokenizer, max_tokens=5)
    tasks = load_tasks(root)
    assert flt.count(tasks.get("short")) == 3
    assert flt.check(tasks.get("short")) is None
    assert flt.check(tasks.get("long")) == "prompt is 8 tokens, over --max-prompt-tokens 5"
    with pytest.raises(SpreadrlError, match="--tokenizer"):
        load_tokenizer(tmp_path / "nothing")


def test_pass_rates_from_trajectories_and_the_band(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [("easy", True)] * 4 + [("mid", True), ("mid", False)] + [("hard", False)] * 4
    lines = [
        json.dumps({"task_id": t, "case": 1, "sample": i, "passed": p})
        for i, (t, p) in enumerate(rows)
    ]
    (run / "trajectories.jsonl").write_text("\n".join(lines) + '\n{"task_id": "torn')
    rates = load_pass_rates(run)
    assert rates == {"easy": (4, 4), "mid": (1, 2), "hard": (0, 4)}
    flt = PassRateFilter(rates, min_pass=0.1, max_pass=0.9)

    class T:
        def __init__(self, task_id: str) -> None:
            self.id = task_id

    assert flt.check(T("mid")) is None
    assert flt.check(T("easy")) == "pass rate 1.00 (4/4) above --max-pass 0.9"
    assert flt.check(T("hard")) == "pass rate 0.00 (0/4) below --min-pass 0.1"
    assert flt.check(T("unseen")) == "no samples of this task in the eval run"
    with pytest.raises(SpreadrlError, match="no trajectories.jsonl"):
        load_pass_rates(tmp_path / "empty")
    with pytest.raises(SpreadrlError, match="--min-pass"):
        PassRateFilter(rates, min_pass=0.9, max_pass=0.1)


def test_apply_filters_reports_and_writes_only_kept_tasks(tmp_path):
    root = make_set(
        tmp_path / "set",
        [
            {"id": "a"},
            {"id": "b", "broken": True},
            {"id": "c", "instruction": "Multiply A1 by ten into B1 (a)."},
            {"id": "d", "instruction": "Something else entirely for the sheet."},
        ],
    )
    filters = default_order([DedupFilter(0.9), StructureFilter()])
    assert [f.name for f in filters] == ["structure", "dedup"]
    dry = apply_filters(load_tasks(root), filters)
    assert dry.out is None and not (tmp_path / "out").exists()
    assert dry.kept == ["a", "d"]
    assert dry.counts == {"structure": 1, "dedup": 1}
    assert dry.removed["b"][0].startswith("structure: case 1: workbook does not open")
    assert dry.removed["c"] == ["dedup: near-duplicate of task 'a' (instruction similarity 1.00)"]

    report = apply_filters(load_tasks(root), [StructureFilter()], tmp_path / "out")
    written = load_tasks(tmp_path / "out")
    assert sorted(t.id for t in written) == ["a", "c", "d"]
    assert json.loads((tmp_path / "out" / REPORT_NAME).read_text())["counts"] == {"structure": 1}
    assert report.out == tmp_path / "out"
    with pytest.raises(SpreadrlError, match="not empty"):
        apply_filters(load_tasks(root), [StructureFilter()], tmp_path / "out")
    apply_filters(load_tasks(root), [DedupFilter(0.9)], tmp_path / "out", overwrite=True)
    assert sorted(t.id for t in load_tasks(tmp_path / "out")) == ["a", "b", "d"]


def _set_with_empty_positions(root: Path) -> Path:
    """Tasks "ok" (B1), "clear-sheet" (Sheet2!A:C on an empty Sheet2), "no-sheet" (Nope!A1)."""
    import openpyxl

    make_set(
        root,
        [
            {"id": "ok"},
            {"id": "clear-sheet", "position": "Sheet2!A:C", "instruction": "Clear Sheet2."},
            {"id": "no-sheet", "position": "'Nope'!A1", "instruction": "Fill Nope."},
        ],
    )
    answer = root / "clear-sheet" / "1_clear-sheet_answer.xlsx"
    book = openpyxl.load_workbook(answer)
    book.create_sheet("Sheet2")
    book.save(answer)
    return root


def test_a_position_covering_no_answer_cell_is_refused_at_load(tmp_path):
    from spreadrl.data.task import EmptyAnswerPositionError, empty_positions

    root = _set_with_empty_positions(tmp_path / "set")
    with pytest.raises(EmptyAnswerPositionError) as caught:
        load_tasks(root)
    message = str(caught.value)
    assert "'clear-sheet'" in message and "Sheet2!A:C" in message and "no cells" in message
    loaded = load_tasks(root, skip_bad=True)
    assert [t.id for t in loaded] == ["ok"]
    assert {p.task_id: p.kind for p in loaded.problems} == {
        "clear-sheet": "empty-position",
        "no-sheet": "empty-position",
    }
    assert "Nope!A1 (no sheet 'Nope')" in loaded.problems[1].message
    # a column-only range over a sheet that holds something covers cells
    answer = root / "ok" / "1_ok_answer.xlsx"
    assert empty_positions(answer, "A:C") == []
    assert empty_positions(answer, "sheet!B1") == []  # sheet names match case-insensitively


def test_data_filter_drops_empty_position_tasks_and_says_how_many(tmp_path):
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    root = _set_with_empty_positions(tmp_path / "set")
    report = apply_filters(load_tasks(root, skip_bad=True), [StructureFilter()])
    assert report.kept == ["ok"]
    assert report.counts == {"empty-position": 2, "structure": 0}
    assert report.removed["clear-sheet"][0].startswith("empty-position: task 'clear-sheet'")
    result = CliRunner().invoke(app, ["data", "filter", str(root), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "kept 1 of 3" in result.output
    assert re.search(r"empty-position\s*\S\s*2", result.output), result.output

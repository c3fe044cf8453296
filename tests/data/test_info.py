"""Task-set summaries: counts, cases, sizes, cells, problems, rendering."""

from __future__ import annotations

import io
import json

from rich.console import Console

from spreadrl.cli.data_info import render_summary
from spreadrl.data.info import summarize_tasks
from spreadrl.data.task import CELL_LEVEL, SHEET_LEVEL, load_tasks
from tests.data.fake_sources import save, write_index


def _make_set(root, *, broken: bool = False):
    entries = []
    specs = [
        ("a", CELL_LEVEL, "B1:B3", "aggregate", "easy", 2),
        ("b", CELL_LEVEL, "Data!C2", "aggregate", "hard", 1),
        ("c", SHEET_LEVEL, "A:C", "lookup", None, 3),
    ]
    for task_id, kind, position, family, difficulty, cases in specs:
        for n in range(1, cases + 1):
            save(root / task_id / f"{n}_{task_id}_input.xlsx", n)
            save(root / task_id / f"{n}_{task_id}_answer.xlsx", n, total=1)
        entry = {
            "id": task_id,
            "instruction": "x",
            "spreadsheet_path": task_id,
            "instruction_type": kind,
            "answer_position": position,
            "source": "synth" if family == "aggregate" else "spreadsheetbench",
            "family": family,
        }
        if difficulty:
            entry["difficulty"] = difficulty
        entries.append(entry)
    if broken:
        entries.append(dict(entries[0], id="gone", spreadsheet_path="gone"))
    write_index(root, entries)


def test_summary_counts(tmp_path):
    _make_set(tmp_path)
    summary = summarize_tasks(load_tasks(tmp_path))
    assert summary["tasks"] == 3 and summary["cases"] == 6
    assert summary["by_instruction_type"] == {CELL_LEVEL: 2, SHEET_LEVEL: 1}
    assert summary["by_family"] == {"aggregate": 2, "lookup": 1}
    assert summary["by_source"] == {"spreadsheetbench": 1, "synth": 2}
    assert summary["by_difficulty"] == {"-": 1, "easy": 1, "hard": 1}
    assert summary["cases_per_task"] == {"1": 1, "2": 1, "3": 1}
    # a: 3 cells x 2 cases, b: 1 cell x 1 case; c's column range depends on the data
    assert summary["answer_cells"] == 7 and summary["tasks_with_column_ranges"] == 1
    sizes = summary["workbook_bytes"]
    files = sorted(tmp_path.rglob("*_input.xlsx"))
    assert sizes["input"] == sum(p.stat().st_size for p in files)
    assert sizes["total"] == sizes["input"] + sizes["answer"] and sizes["answer"] > 0
    assert "input_cells" not in summary
    json.dumps(summary)  # JSON-ready


def test_summary_counts_input_cells_on_request(tmp_path):
    _make_set(tmp_path)
    summary = summarize_tasks(load_tasks(tmp_path), count_cells=True)
    assert summary["input_cells"] == 6  # one value (A1) per input workbook


def test_summary_lists_problems_and_renders(tmp_path):
    _make_set(tmp_path, broken=True)
    summary = summarize_tasks(load_tasks(tmp_path, skip_bad=True))
    assert summary["tasks"] == 3
    assert [p["task_id"] for p in summary["problems"]] == ["gone"]
    buffer = io.StringIO()
    Console(file=buffer, width=200).print(render_summary(summary))
    text = buffer.getvalue()
    for expected in ("tasks", "Cell-Level Manipulation", "aggregate", "1 task(s) skipped", "gone"):
        assert expected in text

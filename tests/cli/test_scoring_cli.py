"""`--scoring` on the command line: check names it, eval compare refuses mixed scorings."""

from __future__ import annotations

import json

import openpyxl

from tests.cli.test_cli_mistakes import cli, one_error_line
from tests.sysdeps import needs_libreoffice


def _report(path, scoring):
    report = {"pass@1": 0.5, "per_case": {"t/1": 0.5}}
    if scoring:
        report["scoring"] = scoring
    path.write_text(json.dumps(report))
    return str(path)


def test_eval_compare_refuses_two_scorings_unless_asked(tmp_path, monkeypatch, capsys):
    hybrid = _report(tmp_path / "a.json", None)  # a report from before the key: hybrid
    sbench = _report(tmp_path / "b.json", "spreadsheetbench")
    code, out, err = cli(monkeypatch, capsys, "eval", "compare", hybrid, sbench)
    assert code == 1
    line = one_error_line(err)
    assert "scored two ways (hybrid vs spreadsheetbench)" in line and "--mixed-scoring" in line
    code, out, _ = cli(monkeypatch, capsys, "eval", "compare", hybrid, sbench, "--mixed-scoring")
    assert code == 0 and "scored two ways" in out
    same = _report(tmp_path / "c.json", "hybrid")
    code, out, _ = cli(monkeypatch, capsys, "eval", "compare", hybrid, same)
    assert code == 0 and "scored two ways" not in out


def test_check_refuses_an_unknown_scoring(tmp_path, monkeypatch, capsys):
    code, _, err = cli(
        monkeypatch,
        capsys,
        "check",
        str(tmp_path),
        "--outputs",
        str(tmp_path),
        "--scoring",
        "excel",
    )
    assert code == 1
    assert "--scoring 'excel': unknown scoring" in one_error_line(err)


@needs_libreoffice
def test_check_scores_the_spreadsheetbench_way_and_says_so(tmp_path, monkeypatch, capsys):
    """A time with microseconds against one without: the hybrid passes, upstream's rule fails."""
    import datetime as dt

    task = tmp_path / "t"
    task.mkdir()
    for name, value in (("input", None), ("answer", dt.time(11, 53, 19, 250000))):
        book = openpyxl.Workbook()
        book.active["A1"] = value
        book.active["A1"].number_format = "hh:mm:ss.000"
        book.save(task / f"1_t_{name}.xlsx")
    (task / "dataset.json").write_text(
        json.dumps(
            [
                {
                    "id": "t",
                    "instruction": "Put the time in A1.",
                    "instruction_type": "Cell-Level Manipulation",
                    "answer_position": "A1",
                    "spreadsheet_path": ".",
                }
            ]
        )
    )
    output = tmp_path / "out.xlsx"
    book = openpyxl.Workbook()
    book.active["A1"] = "=TIME(11,53,19)"
    book.active["A1"].number_format = "hh:mm:ss"
    book.save(output)
    args = ["check", "--task", str(task), "--output", str(output)]
    code, out, _ = cli(monkeypatch, capsys, *args)
    assert code == 0 and "(scoring: hybrid)" in out
    code, out, _ = cli(monkeypatch, capsys, *args, "--scoring", "spreadsheetbench")
    assert code == 1 and "(scoring: spreadsheetbench)" in out and "11:53:19.250" in out

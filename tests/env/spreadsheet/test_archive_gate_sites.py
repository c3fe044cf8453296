"""Where workbooks are read, a refused one ends as the gate says: in an episode, the checker,
the CLI and the importers (serve: tests/serve/test_upload_gate.py).

The episode tests drive the real code interpreter: model-written code writes a
deflate bomb over the working copy, as a policy that appends a million rows would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from spreadrl.archive_gate import WorkbookRefused
from spreadrl.cli.main import main
from spreadrl.data.importers import import_spreadsheetbench
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet import checker
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.env.spreadsheet.recalc import get_engine
from spreadrl.env.spreadsheet.recalc.values import load_values
from spreadrl.env.spreadsheet.workbook import WorkingCopy
from spreadrl.env.types import EndReason, ToolCall
from spreadrl.errors import TaskFormatError
from tests import archive_bombs as bombs
from tests.data.fake_sources import make_spreadsheetbench
from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer

# Python the agent writes: the working copy's sheet becomes 8 MiB of blanks (about 1000:1)
BOMB_CODE = """
import zipfile
path = {path!r}
with zipfile.ZipFile(path) as src:
    parts = {{i.filename: src.read(i) for i in src.infolist()}}
parts["xl/worksheets/sheet1.xml"] = b"<worksheet>" + b" " * (8 << 20) + b"</worksheet>"
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
    for name, data in parts.items():
        out.writestr(name, data)
print("saved")
"""


def _bomb_episode(tmp_path: Path, tools: str, path: str) -> tuple:
    task = make_task(tmp_path, revenue_answer)
    env = SpreadsheetEnv(EnvConfig(tools=tools, sandbox_mode="rlimit"))
    env.reset(task, 1)
    step = env.step(ToolCall("code_interpreter", {"code": BOMB_CODE.format(path=path)}))
    after = env.step(ToolCall("code_interpreter", {"code": "print(1)"}))
    return step, after, env.finish(final_answer="done")


@pytest.mark.parametrize(
    ("tools", "path"), [("full", "workbook.xlsx"), ("spreadsheet-rl", "data/data.xlsx")]
)
def test_code_that_writes_a_bomb_ends_the_episode_scored_zero(tmp_path, tools, path):
    step, after, result = _bomb_episode(tmp_path, tools, path)
    assert not step.ok and step.terminated and step.info["end_reason"] == "workbook_refused"
    assert "workbook refused" in step.observation and "compressed" in step.observation
    assert after.truncated and not after.ok  # nothing runs after the end
    assert (result.reward, result.passed) == (0.0, False)
    assert result.stop_reason == EndReason.WORKBOOK_REFUSED
    assert "workbook refused" in result.mismatches[0].reason


def test_the_episodes_start_copy_is_gated(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    bombs.deflate_bomb(task.case(1).input_path, uncompressed_mb=4)
    with pytest.raises(WorkbookRefused, match="1_t1_input.xlsx: workbook refused"):
        SpreadsheetEnv().reset(task, 1)
    with pytest.raises(WorkbookRefused):
        WorkingCopy(tmp_path, task.case(1).input_path)


def test_the_checker_refuses_an_output_as_a_failure_and_an_answer_as_an_error(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    bomb = bombs.nested_zip(tmp_path / "out.xlsx")
    result = checker.check_workbook(bomb, task.case(1).answer_path, "D2:D6")
    assert not result.passed and "nested archive" in result.refused
    assert result.mismatches[0].reason == result.refused
    with pytest.raises(WorkbookRefused):
        checker.check_workbook(task.case(1).input_path, bomb, "D2:D6")


def test_a_refused_output_at_finish_is_the_episodes_end_reason(tmp_path, monkeypatch):
    task = make_task(tmp_path, revenue_answer)
    env = SpreadsheetEnv()
    env.reset(task, 1)
    bomb = bombs.nested_zip(tmp_path / "nested.xlsx")
    real = checker.check_workbook  # the grading reads the bomb in place of the output
    monkeypatch.setattr(checker, "check_workbook", lambda _out, *a, **k: real(bomb, *a, **k))
    result = env.finish(final_answer="done")
    assert (result.reward, result.stop_reason) == (0.0, EndReason.WORKBOOK_REFUSED)
    assert "nested archive" in result.mismatches[0].reason


@pytest.mark.parametrize("engine", ["ironcalc", "hybrid"])
def test_the_recalculation_engines_and_value_reader_refuse(tmp_path, engine):
    bomb = bombs.renamed_nested_zip(tmp_path / "b.xlsx")
    with pytest.raises(WorkbookRefused):
        get_engine(engine).evaluate(bomb)
    with pytest.raises(WorkbookRefused):
        load_values(bomb, engine=engine)


def test_libreoffice_refuses_before_soffice_sees_the_file(tmp_path, monkeypatch):
    from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeEngine

    engine = LibreOfficeEngine.__new__(LibreOfficeEngine)  # no soffice started
    engine.server = None
    engine.soffice = "/nonexistent/soffice"
    bomb = bombs.lying_sizes(tmp_path / "b.xlsx")
    with pytest.raises(WorkbookRefused, match="declared size is false"):
        engine.recalculate(bomb, tmp_path / "out.xlsx")


def test_spreadrl_check_says_refused_in_one_error_line(tmp_path, monkeypatch, capsys):
    task = make_task(tmp_path, revenue_answer)
    bomb = bombs.deflate_bomb(tmp_path / "bomb.xlsx", uncompressed_mb=4)
    entry = {
        "id": "t1",
        "instruction": "x",
        "spreadsheet_path": "task",
        "instruction_type": "Cell-Level Manipulation",
        "answer_position": "D2:D6",
    }
    (task.folder.parent / "dataset.json").write_text(json.dumps([entry]))
    argv = ["spreadrl", "check", "--task", str(task.folder), "--output", str(bomb)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_info.value.code not in (0, None) and "Traceback" not in err
    assert lines[-1].startswith("error: ") and "workbook refused" in lines[-1], err
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:]


def test_an_importer_skips_a_bomb_with_the_reason(tmp_path):
    src = make_spreadsheetbench(tmp_path / "sb")
    bombs.nested_zip(src / "spreadsheet" / "102" / "1_102_answer.xlsx")
    with pytest.raises(TaskFormatError, match="workbook refused"):
        import_spreadsheetbench(src, tmp_path / "out")
    report = import_spreadsheetbench(src, tmp_path / "out2", skip_bad=True)
    reasons = {p.task_id: p.message for p in report.skipped}
    assert "1_102_answer.xlsx: workbook refused: member xl/media/inner.zip" in reasons["102"]

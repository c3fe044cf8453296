"""SpreadsheetEnv: reset/step/finish, budgets, scoring, outputs, and reference-solution replay."""

from __future__ import annotations

import hashlib

import pytest

from spreadrl.data.synth import describe_families, synthesize
from spreadrl.env.config import EnvConfig
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv, replay
from spreadrl.env.types import ToolCall
from spreadrl.errors import SpreadrlError, WorkbookError
from tests.env.spreadsheet.gym_helpers import make_task, revenue_answer

SOLUTION = [
    {"name": "write_range", "arguments": {"range": "D2", "values": "=B2*C2"}},
    {"name": "fill_formula", "arguments": {"source": "D2", "target": "D3:D6"}},
]


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reset_gives_instruction_overview_schemas_and_a_private_copy(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    before = _digest(task.cases[0].input_path)
    with SpreadsheetEnv(EnvConfig(tools="minimal"), workdir_root=tmp_path / "eps") as env:
        obs = env.reset(task, 1)
        assert obs.instruction == task.instruction
        assert [s["function"]["name"] for s in obs.tool_schemas] == [
            "recalculate_and_read",
            "code_interpreter",
        ]
        lines = obs.workbook_overview.splitlines()
        assert lines[:3] == [
            "Workbook: 2 sheets",
            "Sheet 'Sheet1': 6 rows x 3 columns (A1:C6)",
            '  A1: "Region" | B1: "Units" | C1: "Price"',
        ]
        assert len([ln for ln in lines if ln.startswith("  A")]) == 4 + 1  # 4 rows + notes
        folder = env.folder
        assert folder.parent == tmp_path / "eps"
        assert sorted(p.name for p in folder.iterdir()) == ["workbook.xlsx"]
        env.step({"name": "code_interpreter", "arguments": {"code": "print(1)"}})
    assert not folder.exists()
    assert _digest(task.cases[0].input_path) == before


def test_overview_sizes(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    with SpreadsheetEnv(EnvConfig(overview="none")) as env:
        assert env.reset(task).workbook_overview == ""
    with SpreadsheetEnv(EnvConfig(overview="full", overview_max_sheets=1)) as env:
        text = env.reset(task).workbook_overview
        assert 'A6: "North"' in text and text.endswith("[1 more sheets: use list_sheets]")
    with SpreadsheetEnv(EnvConfig(overview_rows=1)) as env:
        text = env.reset(task).workbook_overview  # the header row and one more
        assert 'A2: "North"' in text and "A3" not in text


def test_solved_episode_scores_one_and_keeps_the_output(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    env = SpreadsheetEnv(EnvConfig(keep_outputs_dir=str(tmp_path / "outs")))
    env.reset(task, 1)
    steps = [env.step(ToolCall.from_json(c)) for c in SOLUTION]
    assert all(s.ok for s in steps)
    result = env.finish(final_answer="done")
    assert (result.reward, result.passed, result.mismatches) == (1.0, True, [])
    assert (result.tool_calls, result.tool_errors, result.stop_reason) == (2, 0, "answered")
    assert result.output_path == str(tmp_path / "outs" / "1_t1_output.xlsx")
    assert (tmp_path / "outs" / "1_t1_output.xlsx").is_file()
    assert result.info["checked_cells"] == 5
    assert env.folder is None


def test_wrong_episode_scores_zero_with_mismatches(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    wrong = [{"name": "write_range", "arguments": {"range": "D2:D6", "values": "=B2+C2"}}]
    result, steps = replay(task, 1, wrong, output_path=tmp_path / "o" / "out.xlsx")
    assert steps[0].ok and result.reward == 0.0 and not result.passed
    assert result.mismatches[0].cell == "D2" and result.mismatches[0].expected == 25
    assert result.stop_reason == "no_answer" and (tmp_path / "o" / "out.xlsx").is_file()


def test_bad_calls_are_observations_and_the_episode_goes_on(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    with SpreadsheetEnv() as env:
        env.reset(task)
        unknown = env.step({"name": "write_cells", "arguments": {}})
        assert not unknown.ok and unknown.observation.startswith(
            "Error: unknown tool 'write_cells'"
        )
        assert "write_range" in unknown.observation
        typed = env.step({"name": "write_range", "arguments": {"range": 5, "values": 1}})
        assert typed.observation.startswith("Error: bad arguments for write_range: 'range'")
        assert not env.step({"arguments": {}}).ok
        assert not env.step(ToolCall("inspect_range", {"ranges": ["Nope!A1"]})).ok
        assert not env.step(ToolCall("write_range", {"range": "A1", "values": [[1], 2]})).ok
        for call in SOLUTION:
            assert env.step(call).ok
        result = env.finish()
        assert result.reward == 1.0 and result.tool_errors == 5 and result.tool_calls == 6


def test_tool_call_budget_truncates(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    with SpreadsheetEnv(EnvConfig(max_tool_calls=2)) as env:
        env.reset(task)
        first = env.step({"name": "list_sheets", "arguments": {}})
        second = env.step({"name": "list_sheets", "arguments": {}})
        third = env.step({"name": "write_range", "arguments": {"range": "D2", "values": 1}})
        assert not first.truncated and second.ok and second.truncated
        assert third.truncated and not third.ok and "budget is spent" in third.observation
        assert env.ctx.book.wb["Sheet1"]["D2"].value is None  # the over-budget call did not run
        result = env.finish()
        assert result.stop_reason == "max_tool_calls" and result.tool_calls == 2


def test_observation_truncation(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    with SpreadsheetEnv(EnvConfig(max_observation_chars=120)) as env:
        env.reset(task)
        obs = env.step({"name": "inspect_range", "arguments": {"ranges": ["A1:C6"]}}).observation
        assert len(obs) <= 120 and "[truncated: " in obs and "characters not shown]" in obs


def test_misuse_of_the_interface_raises(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    env = SpreadsheetEnv()
    with pytest.raises(SpreadrlError, match="before reset"):
        env.step({"name": "list_sheets"})
    with pytest.raises(SpreadrlError, match="before reset"):
        env.finish()
    with pytest.raises(SpreadrlError, match="no case 7"):
        env.reset(task, 7)
    with pytest.raises(SpreadrlError, match="unknown tool or preset"):
        SpreadsheetEnv(EnvConfig(tools=["nope"]))
    env.reset(task)
    env.reset(task)  # a second reset starts over
    assert env.finish().reward == 0.0
    env.close()


def test_every_family_reference_solution_replays_to_one(tmp_path):
    families = [f["name"] for f in describe_families()]
    tasks = synthesize(tmp_path / "suite", len(families), 11, families=families)
    assert {t.family for t in tasks} == set(families)
    for task in tasks:
        for case in task.cases:
            result, steps = replay(task, case.index, case.load_solution())
            assert all(s.ok for s in steps), (task.id, [s.observation for s in steps])
            assert result.reward == 1.0, (task.id, case.index, result.mismatches[:3])
    task = tasks.tasks[0]
    case = task.cases[0]
    result, _ = replay(task, case.index, case.load_solution()[:-1] + [
        {"name": "clear_range", "arguments": {"range": "A1:Z200"}}
    ])  # fmt: skip
    assert result.reward == 0.0 and result.mismatches


def test_the_gym_scores_with_the_checkers_engine_and_starts_no_libreoffice_for_plain_tasks(
    tmp_path, monkeypatch
):
    """env.engine defaults to hybrid (the checker's); its LibreOffice is asked (and started)
    only when a cell IronCalc is not trusted on appears, which no family's solution has."""
    from spreadrl.env.spreadsheet.recalc.libreoffice import LibreOfficeServer
    from spreadrl.env.spreadsheet.recalc.lo_service import ServiceClient
    from tests.sysdeps import use_libreoffice

    assert EnvConfig().engine == "hybrid"
    # The server starts inside convert() on its first call (one per process, kept after):
    # counting convert() calls is order-independent (an earlier test may have started it).
    starts = []

    def convert(self, src, dst):
        starts.append(src)
        raise WorkbookError("not in this test")

    monkeypatch.setattr(LibreOfficeServer, "convert", convert)
    monkeypatch.setattr(ServiceClient, "convert", convert)  # the machine-wide service's client
    families = [f["name"] for f in describe_families()]
    tasks = synthesize(tmp_path / "suite", len(families), 5, families=families)
    for task in tasks:
        case = task.cases[0]
        result, _ = replay(task, case.index, case.load_solution())
        assert result.reward == 1.0, (task.id, result.mismatches[:3])
    assert starts == []
    if use_libreoffice():  # installed, or required (CI): tests/sysdeps.py
        # the control: an untrusted cell (TEXT with a format code) does ask for it
        task = make_task(tmp_path, revenue_answer)
        replay(
            task,
            1,
            [{"name": "write_range", "arguments": {"range": "E2", "values": '=TEXT(B2,"0.0")'}}],
        )
        assert len(starts) == 1

"""Cells each tool call changed: recorded in the step's info and in the trajectory."""

from __future__ import annotations

from spreadrl.env.factory import make_env_pool
from spreadrl.env.spreadsheet.cell_changes import CellChangeTracker, diff, snapshot
from spreadrl.env.spreadsheet.episode import SpreadsheetEnv
from spreadrl.rollout.config import RolloutConfig
from spreadrl.rollout.engines.scripted import format_tool_call
from spreadrl.rollout.runner import EpisodeJob, run_episodes
from spreadrl.rollout.types import PolicyTurn
from tests.env.spreadsheet.gym_helpers import make_ctx, make_task, revenue_answer


def test_an_edit_reports_before_and_after_a_read_reports_nothing(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    with SpreadsheetEnv() as env:
        env.reset(task, 1)
        read = env.step({"name": "inspect_range", "arguments": {"ranges": ["Sheet1!A1:C3"]}})
        assert read.ok and "changed_cells" not in read.info
        wrote = env.step(
            {
                "name": "write_range",
                "arguments": {"range": "B2:D2", "values": [[11, 2.5, "=B2*C2"]]},
            }
        )
        assert wrote.ok, wrote.observation
        assert wrote.info["changed_cells"] == {
            "cells": [
                {"sheet": "Sheet1", "cell": "B2", "before": 10, "after": 11},
                {"sheet": "Sheet1", "cell": "D2", "before": None, "after": "=B2*C2"},
            ],
            "total": 2,
        }
        moved = env.step({"name": "delete_rows", "arguments": {"sheet": "Sheet1", "start_row": 2}})
        assert moved.ok, moved.observation
        cells = {c["cell"]: c for c in moved.info["changed_cells"]["cells"]}
        assert cells["A2"] == {"sheet": "Sheet1", "cell": "A2", "before": "North", "after": "South"}
        assert cells["A6"]["after"] is None  # the last row moved up and left an empty row


def test_the_tracker_caps_the_list_and_skips_huge_books(tmp_path):
    ctx = make_ctx(tmp_path)
    tracker = CellChangeTracker(limit=3)
    tracker.before(ctx.book)
    for r in range(1, 11):
        ctx.book.wb["Sheet1"].cell(r, 5).value = r
    ctx.book.touch()
    changed = tracker.after(ctx.book)["changed_cells"]
    assert changed["total"] == 10 and [c["cell"] for c in changed["cells"]] == ["E1", "E2", "E3"]
    assert tracker.after(ctx.book) == {}  # nothing new since
    small = CellChangeTracker(max_cells=5)
    small.before(ctx.book)
    ctx.book.wb["Sheet1"]["F1"] = 1
    ctx.book.touch()
    assert small.after(ctx.book)["changed_cells"]["skipped"] == "workbook too large"


def test_diff_of_snapshots_orders_by_sheet_row_column(tmp_path):
    ctx = make_ctx(tmp_path)
    before = snapshot(ctx.book.wb)
    ctx.book.wb["My Notes"]["A1"] = None
    ctx.book.wb["Sheet1"]["C1"] = "Cost"
    out = diff(before, snapshot(ctx.book.wb))
    assert [(c["sheet"], c["cell"], c["before"], c["after"]) for c in out["cells"]] == [
        ("My Notes", "A1", "apple pie", None),
        ("Sheet1", "C1", "Price", "Cost"),
    ]


class ListPolicy:
    token_level = False

    def __init__(self, script):
        self.script = script

    def act_messages(self, states, params):
        return [
            PolicyTurn(text=self.script[min(s.turns_taken, len(self.script) - 1)]) for s in states
        ]


def test_the_trajectory_keys_changes_by_tool_message(tmp_path):
    task = make_task(tmp_path, revenue_answer)
    script = [
        format_tool_call("inspect_range", {"ranges": ["A1:C2"]}),
        format_tool_call("write_range", {"range": "D2", "values": "=B2*C2"}),
        "Done.",
    ]
    with make_env_pool("full") as pool:
        (traj,) = run_episodes(
            ListPolicy(script), pool, [EpisodeJob(task)], RolloutConfig()
        ).trajectories
    roles = [m["role"] for m in traj.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert traj.metadata["cell_changes"] == {
        "5": {
            "cells": [{"sheet": "Sheet1", "cell": "D2", "before": None, "after": "=B2*C2"}],
            "total": 1,
        }
    }
    assert traj.to_json(with_tokens=False)["metadata"]["cell_changes"]["5"]["total"] == 1

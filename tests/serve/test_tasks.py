"""POST /v1/tasks: an uploaded workbook, the agent loop, the edited workbook back with its diff."""

from __future__ import annotations

import io

import openpyxl
from fastapi.testclient import TestClient

from spreadrl.serve.tasks import changed_cells, steps_of
from tests.serve.conftest import xlsx_bytes
from tests.serve.fakes import ScriptedPolicy, tool_call, workbook_pool_factory

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def test_task_runs_the_agent_and_returns_the_edited_workbook(app_factory, tiny_policy):
    tokenizer = tiny_policy[1]
    policy = ScriptedPolicy(
        tokenizer,
        [
            tool_call("write_cell", cell="C1", value="total"),
            tool_call("write_cell", cell="C2", value="=SUM(B2:B4)"),
            "The total is in C2.",
        ],
    )
    presets: list[str] = []
    app = app_factory(policy=policy, pool_factory=workbook_pool_factory(presets))
    with TestClient(app) as client:
        r = client.post(
            "/v1/tasks",
            files={"file": ("book.xlsx", xlsx_bytes(), XLSX)},
            data={"instruction": "Put the total of B in C2", "max_turns": "5", "preset": "minimal"},
        )
        assert r.status_code == 200, r.text
        data = r.json()
        assert presets == ["minimal"]
        assert data["stop_reason"] == "answered"
        assert data["turns"] == 3 and data["tool_calls"] == 2
        assert [m["role"] for m in data["messages"]] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert data["messages"][1]["content"].startswith("Put the total of B in C2")
        steps = data["steps"]
        assert steps[0]["tool_calls"] == [
            {"name": "write_cell", "arguments": {"cell": "C1", "value": "total"}}
        ]
        assert steps[0]["observations"] == ["wrote 'total' to C1"]
        assert steps[2]["text"] == "The total is in C2." and steps[2]["tool_calls"] == []
        # the page's trajectory component reads each turn as the rollout read it
        turns = data["assistant_turns"]
        assert sorted(turns, key=int) == ["2", "4", "6"]  # the assistant messages' indexes
        assert turns["2"]["tool_calls"] == steps[0]["tool_calls"]
        assert turns["6"] == {
            "content": "The total is in C2.",
            "reasoning_content": None,
            "tool_calls": [],
            "errors": [],
        }
        assert data["changes"]["cells"] == [
            {"sheet": "Sheet1", "cell": "C1", "before": None, "after": "total"},
            {"sheet": "Sheet1", "cell": "C2", "before": None, "after": "=SUM(B2:B4)"},
        ]
        download = client.get(data["output_url"])
        assert download.status_code == 200
        assert download.headers["content-type"] == XLSX
        book = openpyxl.load_workbook(io.BytesIO(download.content))
        assert book.active["C2"].value == "=SUM(B2:B4)"
        assert book.active["B3"].value == 2


def test_task_with_the_tiny_model_returns_a_valid_workbook(app_factory):
    """Random weights: the turns are garbage, but the reply is well formed and the file opens."""
    app = app_factory(pool_factory=workbook_pool_factory())
    with TestClient(app) as client:
        r = client.post(
            "/v1/tasks",
            files={"file": ("book.xlsx", xlsx_bytes(), XLSX)},
            data={"instruction": "Sum column B", "max_turns": "2", "max_tokens": "8"},
        )
        assert r.status_code == 200, r.text
        data = r.json()
        assert 1 <= data["turns"] <= 2
        assert data["stop_reason"] in ("answered", "max_turns", "max_response_tokens")
        book = openpyxl.load_workbook(io.BytesIO(client.get(data["output_url"]).content))
        assert book.active["B4"].value == 3


def test_task_form_fields_are_validated(app_factory):
    with TestClient(app_factory(pool_factory=workbook_pool_factory())) as client:
        r = client.post(
            "/v1/tasks",
            files={"file": ("book.xlsx", xlsx_bytes(), XLSX)},
            data={"instruction": "x", "max_turns": "0"},
        )
        assert r.status_code == 422
        assert "max_turns" in r.json()["error"]["message"]


def test_old_task_folders_are_pruned(app_factory, tiny_policy):
    app = app_factory(
        policy=ScriptedPolicy(tiny_policy[1], []),
        pool_factory=workbook_pool_factory(),
        keep_tasks=2,
    )
    with TestClient(app) as client:
        urls = []
        for _ in range(3):
            r = client.post(
                "/v1/tasks",
                files={"file": ("book.xlsx", xlsx_bytes(), XLSX)},
                data={"instruction": "nothing to do"},
            )
            urls.append(r.json()["output_url"])
        assert client.get(urls[0]).status_code == 404
        assert [client.get(u).status_code for u in urls[1:]] == [200, 200]


def test_changed_cells_reports_values_and_sheets(tmp_path):
    before, after = tmp_path / "before.xlsx", tmp_path / "after.xlsx"
    before.write_bytes(xlsx_bytes([["a", 1], ["b", 2]]))
    book = openpyxl.load_workbook(before)
    book.active["B2"] = 20
    book.active["A1"] = None
    book.create_sheet("Notes")["A1"] = "hi"
    book.save(after)
    diff = changed_cells(before, after)
    assert diff["cells"] == [
        {"sheet": "Sheet1", "cell": "A1", "before": "a", "after": None},
        {"sheet": "Sheet1", "cell": "B2", "before": 2, "after": 20},
        {"sheet": "Notes", "cell": "A1", "before": None, "after": "hi"},
    ]
    assert diff["sheets_added"] == ["Notes"] and diff["sheets_removed"] == []
    assert diff["total"] == 3 and not diff["truncated"]
    assert changed_cells(before, after, limit=1)["truncated"]


def test_steps_pair_calls_with_observations_and_keep_parse_errors():
    steps = steps_of(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "<tool_call>\n{bad json\n</tool_call>"},
            {"role": "tool", "content": "Error: not JSON"},
            {"role": "assistant", "content": "<think>ok</think>Done."},
        ]
    )
    assert steps[0]["errors"] and steps[0]["observations"] == ["Error: not JSON"]
    assert steps[1] == {
        "text": "Done.",
        "reasoning": "ok",
        "tool_calls": [],
        "errors": [],
        "observations": [],
    }

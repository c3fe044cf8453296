"""The task endpoint's progress records, the preset select, and the viewer mounted in serve."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.serve.conftest import make_settings, xlsx_bytes
from tests.serve.fakes import ScriptedPolicy, tool_call, workbook_pool_factory
from tests.serve.viewer_run import build_run

XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _post(client, **data):
    return client.post(
        "/v1/tasks",
        files={"file": ("book.xlsx", xlsx_bytes(), XLSX)},
        data={"instruction": "Label C1", **data},
    )


def test_progress_records_each_call_and_its_result(app_factory, tiny_policy):
    policy = ScriptedPolicy(tiny_policy[1], [tool_call("write_cell", cell="C1", value="x")])
    app = app_factory(policy=policy, pool_factory=workbook_pool_factory())
    with TestClient(app) as client:
        assert client.get("/v1/tasks/progress/0123456789abcdef").status_code == 404
        r = _post(client, progress_id="0123456789abcdef")
        assert r.status_code == 200, r.text
        snap = client.get("/v1/tasks/progress/0123456789abcdef").json()
        assert snap["status"] == "done" and snap["elapsed_s"] >= 0
        assert snap["events"] == [
            {
                "call": {"name": "write_cell", "arguments": {"cell": "C1", "value": "x"}},
                "observation": "wrote 'x' to C1",
                "ok": True,
            }
        ]
        bad = _post(client, progress_id="../../etc")
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "bad_progress_id"


def test_page_offers_the_presets_with_the_server_default_selected(app_factory):
    with TestClient(app_factory(preset="minimal")) as client:
        page = client.get("/").text
        assert '<option value="minimal" selected>minimal</option>' in page
        assert '<option value="full">full</option>' in page
        assert client.get("/static/trajectory.js").status_code == 200
    with TestClient(app_factory(preset="write_range,inspect_range")) as client:
        page = client.get("/").text
        assert '<option value="write_range,inspect_range" selected>' in page


def test_serve_mounts_the_viewer_when_given_a_run_folder(tiny_policy, tmp_path):
    from spreadrl.serve.app import create_app

    run = build_run(tmp_path / "run")
    app = create_app(make_settings(), tiny_policy[0], tiny_policy[1], view_dir=run)
    with TestClient(app) as client:
        names = [r["name"] for r in client.get("/view/api/runs").json()["runs"]]
        assert names == ["eval-grpo", "eval-sft", "grpo", "sft"]
        assert "spreadrl view" in client.get("/view/").text

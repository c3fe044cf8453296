"""spreadrl view: the JSON API over a run folder, and the page in headless Chromium.

The browser test loads the viewer for a demo-sized run (real gym episodes), clicks
a trajectory, checks that the cell grid shows the changed cells, and keeps a
screenshot (tests/artifacts/viewer.png, or $SPREADRL_TEST_ARTIFACTS/viewer.png).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.testclient import TestClient

from spreadrl.serve.view import create_view_app, find_runs
from tests.serve.conftest import live_server
from tests.serve.test_page import CHROMIUM
from tests.serve.viewer_run import REASONING, build_run

ARTIFACTS = Path(
    os.environ.get("SPREADRL_TEST_ARTIFACTS", Path(__file__).resolve().parents[1] / "artifacts")
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return build_run(tmp_path_factory.mktemp("demo-run"))


def test_find_runs_names_the_sub_folders_with_run_files(run_dir):
    assert sorted(find_runs(run_dir)) == ["eval-grpo", "eval-sft", "grpo", "sft"]


def test_api_serves_metrics_reports_and_filtered_trajectories(run_dir):
    client = TestClient(create_view_app(run_dir))
    runs = {r["name"]: r for r in client.get("/view/api/runs").json()["runs"]}
    assert runs["grpo"]["metrics.jsonl"] and runs["grpo"]["trajectories.jsonl"]
    assert runs["eval-sft"]["report.json"] and not runs["eval-sft"]["metrics.jsonl"]
    rows = client.get("/view/api/metrics", params={"run": "grpo"}).json()["rows"]
    assert [r["step"] for r in rows] == [1, 2, 3]
    report = client.get("/view/api/report", params={"run": "eval-grpo"}).json()["report"]
    assert report["pass@1"] == 0.5  # half the samples follow the good script

    listing = client.get("/view/api/trajectories", params={"run": "grpo"}).json()
    assert listing["total"] == 12 and listing["steps"] == [1, 2, 3]
    step2 = client.get("/view/api/trajectories", params={"run": "grpo", "step": 2}).json()
    assert {i["step"] for i in step2["items"]} == {2} and step2["matched"] == 4
    passed = client.get(
        "/view/api/trajectories", params={"run": "grpo", "passed": "true", "min_reward": 0.5}
    ).json()["items"]
    assert passed and all(i["passed"] and i["reward"] >= 0.5 for i in passed)
    assert all(i["changed_cells"] == 5 for i in passed)  # D2:D6
    none = client.get("/view/api/trajectories", params={"run": "grpo", "task": "nope"}).json()
    assert none["matched"] == 0

    traj = client.get(
        "/view/api/trajectory", params={"run": "grpo", "index": passed[0]["index"]}
    ).json()["trajectory"]
    changes = traj["metadata"]["cell_changes"]
    (write,) = [c for c in changes.values() if c["total"] == 5]
    assert write["cells"][0] == {"sheet": "Sheet1", "cell": "D2", "before": None, "after": "=B2*C2"}


def test_api_refuses_unknown_runs_paths_and_indexes(run_dir):
    client = TestClient(create_view_app(run_dir))
    assert client.get("/view/api/metrics", params={"run": "../../etc"}).status_code == 404
    assert (
        client.get("/view/api/trajectory", params={"run": "grpo", "index": 99}).status_code == 404
    )
    assert client.get("/static/../serve/view.py").status_code == 404
    assert client.get("/static/vendor/uPlot.iife.min.js").status_code == 200
    assert client.get("/").status_code == 200  # redirected to /view/


HARNESS = """<!doctype html><html><body style="margin:0">
<iframe id="app" src="/view/" width="1400" height="1100" style="border:0"></iframe>
<script>
const frame = document.getElementById("app");
function report(obj) { fetch("/_test/result", {method: "POST", body: JSON.stringify(obj)}); }
function waitFor(test, ms) {
  return new Promise((resolve, reject) => {
    const start = Date.now();
    const timer = setInterval(() => {
      let value = null;
      try { value = test(); } catch (e) {}
      if (value) { clearInterval(timer); resolve(value); }
      else if (Date.now() - start > ms) { clearInterval(timer); reject(new Error("timed out")); }
    }, 50);
  });
}
frame.addEventListener("load", async () => {
  try {
    const doc = frame.contentDocument;
    await waitFor(() => doc.body.dataset.ready, 15000);
    if (doc.body.dataset.ready !== "1") throw new Error(doc.getElementById("load-error").textContent);
    const rows = [...doc.querySelectorAll("#traj-list tbody tr")];
    const target = rows.find((r) => r.cells[4].textContent === "pass");
    target.click();
    const cell = await waitFor(() => doc.querySelector("#traj-turns table.cell-grid td.changed"), 15000);
    const reasoning = [...doc.querySelectorAll("#traj-turns .turn")].map((t) => {
      const d = t.querySelector("details.reasoning");
      return d ? {open: d.open, summary: d.querySelector("summary").textContent,
                  text: d.querySelector("pre").textContent} : null;
    });
    // a file written before assistant_turns existed: the message alone still shows
    const run = encodeURIComponent(doc.getElementById("traj-run").value);
    const shown = await (await fetch("/view/api/trajectory?run=" + run + "&index=" + target.dataset.index)).json();
    const old = JSON.parse(JSON.stringify(shown.trajectory));
    delete old.metadata.assistant_turns;
    const box = doc.createElement("div");
    frame.contentWindow.eval("SpreadrlTrajectory").render(box, old);  // a const, not a window property
    const oldFile = {
      reasoning: [...box.querySelectorAll("details.reasoning pre")].map((p) => p.textContent),
      calls: [...box.querySelectorAll("pre.call")].map((p) => p.textContent),
      text: [...box.querySelectorAll("pre.model-text")].map((p) => p.textContent),
    };
    // curves: one unit per chart, the run's config, EMA smoothing, and two runs overlaid
    const win = frame.contentWindow;
    const unsmoothed = win.spreadrlCharts.map((c) => ({title: c.title, keys: c.keys, data: c.data}));
    const config = doc.querySelector('#configs details[data-run="grpo"] pre').textContent;
    doc.getElementById("smooth").value = "0.9";
    doc.getElementById("smooth").dispatchEvent(new Event("input"));
    await waitFor(() => win.spreadrlCharts.length && doc.getElementById("smooth-value").textContent === "0.90" && win.spreadrlCharts, 15000);
    const smoothed = win.spreadrlCharts.map((c) => ({title: c.title, data: c.data}));
    doc.querySelector('#metrics-runs input[value="sft"]').click();
    const overlaid = await waitFor(() => {
      const charts = win.spreadrlCharts.map((c) => ({title: c.title, labels: c.labels}));
      return charts.some((c) => c.labels.some((l) => l.startsWith("sft: "))) && charts;
    }, 15000);
    doc.querySelector("#traj-turns details.reasoning").open = true;  // for the screenshot
    doc.getElementById("trajectories").scrollIntoView();
    report({
      charts: [...doc.querySelectorAll("#charts .chart")].map((c) => c.dataset.title),
      canvases: doc.querySelectorAll("#charts canvas").length,
      reportHead: [...doc.querySelectorAll("#report-table tr:first-child th")].map((t) => t.textContent),
      stopped: [...doc.querySelectorAll("#report p.stopped")].map((p) => p.textContent),
      listed: rows.length,
      turns: doc.querySelectorAll("#traj-turns .turn").length,
      calls: [...doc.querySelectorAll("#traj-turns pre.call")].map((p) => p.textContent),
      grid: [...doc.querySelectorAll("#traj-turns table.cell-grid td.changed")].map(
        (td) => [td.dataset.cell, td.querySelector(".before").textContent, td.querySelector(".after").textContent]),
      head: doc.getElementById("traj-head").textContent,
      reasoning: reasoning,
      oldFile: oldFile,
      unsmoothed: unsmoothed,
      smoothed: smoothed,
      overlaid: overlaid,
      config: config,
    });
  } catch (err) { report({error: String(err)}); }
});
</script></body></html>"""


def _chromium(url: str, profile: Path, screenshot: Path) -> None:
    if not Path(CHROMIUM).exists():
        raise AssertionError(
            f"{CHROMIUM} not found: the viewer test needs Chromium. Install it with "
            "`make sysdeps` or `apt-get install -y chromium` (Debian package `chromium`)."
        )
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,1100",
        "--virtual-time-budget=30000",
        f"--screenshot={screenshot}",
    ]
    proc = subprocess.run(
        [CHROMIUM, *flags, url], capture_output=True, text=True, timeout=90, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def _check_curves(seen: dict) -> None:
    """No chart mixes seconds with rates; smoothing changes the curves; runs overlay; the
    config shows (issue 32: tokens_per_s was drawn on the seconds axis)."""
    by_title = {c["title"]: c for c in seen["unsmoothed"]}
    for chart in seen["unsmoothed"]:
        rates = [k.endswith("_per_s") for k in chart["keys"]]
        assert all(rates) or not any(rates), f"{chart['title']} mixes units: {chart['keys']}"
    assert by_title["Throughput (per second)"]["keys"] == ["tokens_per_s"]
    assert "tokens_per_s" not in by_title["Time per step (s)"]["keys"]
    raw = by_title["Pass rate"]["data"][1]
    smooth = {c["title"]: c["data"] for c in seen["smoothed"]}["Pass rate"][1]
    assert raw == [0.25, 0.5, 0.75]
    assert smooth[0] == raw[0] and smooth[1] < raw[1] and smooth[2] < raw[2]  # lags the rise
    overlaid = {c["title"]: c["labels"] for c in seen["overlaid"]}
    assert {"grpo: step_s", "sft: step_s"} <= set(overlaid["Time per step (s)"])
    assert overlaid["Loss"] == ["sft: loss"]
    assert "group_size: 4" in seen["config"]


def test_viewer_page_in_chromium_shows_curves_reports_and_a_changed_cell(run_dir, tmp_path):
    app = create_view_app(run_dir)
    results: list[dict] = []

    async def record(request: Request) -> Response:
        results.append(json.loads(await request.body()))
        return Response("ok")

    app.add_api_route("/_test/harness", lambda: HTMLResponse(HARNESS), methods=["GET"])
    app.add_api_route("/_test/result", record, methods=["POST"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "viewer.png"
    shot.unlink(missing_ok=True)
    with live_server(app) as url:
        _chromium(f"{url}/_test/harness", tmp_path / "profile", shot)
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
    assert results, "the harness never reported (the page did not finish loading)"
    seen = results[0]
    assert "error" not in seen, seen
    _check_curves(seen)
    assert seen["charts"][:4] == [
        "Reward (mean, and its parts)",
        "Pass rate",
        "Response length (tokens)",
        "Tool calls per episode",
    ]
    assert {"KL to the reference", "Entropy", "Clip fraction", "Time per step (s)"} <= set(
        seen["charts"]
    )
    assert seen["canvases"] >= len(seen["charts"])  # uPlot drew every chart
    # the older report is A (written first: the demo's eval before RL)
    assert seen["reportHead"] == ["metric", "A: eval-sft", "B: eval-grpo", "B - A"]
    stopped = json.loads((run_dir / "eval-sft" / "report.json").read_text())
    assert seen["stopped"] == [  # eval-sft's report is a stopped eval's; eval-grpo's is whole
        f"eval-sft is a stopped eval: {stopped['episodes']} of {stopped['episodes_planned']} "
        "episodes; the same eval command finishes it"
    ]
    assert seen["listed"] == 12
    assert seen["turns"] == 3 and seen["calls"][1].startswith("write_range ")
    # the second turn's reasoning, collapsed, apart from its text and call
    assert seen["reasoning"][0] is None and seen["reasoning"][2] is None
    assert seen["reasoning"][1] == {
        "open": False,
        "summary": f"reasoning ({len(REASONING)} characters)",
        "text": REASONING,
    }
    assert seen["oldFile"]["reasoning"] == [REASONING]  # from the message's reasoning_content
    assert seen["oldFile"]["calls"] == seen["calls"]
    assert "Now the revenue column." in seen["oldFile"]["text"]
    assert not any("think>" in t for t in seen["oldFile"]["text"])
    assert seen["grid"][0] == ["D2", "\u2205", "=B2*C2"]
    assert [g[0] for g in seen["grid"]] == ["D2", "D3", "D4", "D5", "D6"]
    assert "passed" in html.unescape(seen["head"])
    assert shot.is_file() and shot.stat().st_size > 10_000, "no screenshot was written"
    assert re.match(rb"\x89PNG", shot.read_bytes()[:4])


def test_cli_view_explains_a_folder_without_runs(tmp_path):
    from typer.testing import CliRunner

    from spreadrl.cli.main import app

    result = CliRunner().invoke(app, ["view", str(tmp_path)])
    assert result.exit_code != 0
    assert "no metrics.jsonl, trajectories.jsonl or report.json" in str(result.exception)
    result = CliRunner().invoke(app, ["view", str(tmp_path / "missing")])
    assert "not a folder" in str(result.exception)


def test_a_run_still_writing_shows_new_rows_and_skips_a_torn_line(tmp_path):
    run = tmp_path / "grpo"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 2.0}\n')
    client = TestClient(create_view_app(tmp_path))
    assert [r["step"] for r in client.get("/view/api/metrics?run=grpo").json()["rows"]] == [1]
    with metrics.open("a") as fh:
        fh.write('{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    rows = client.get("/view/api/metrics?run=grpo").json()["rows"]
    assert [r["step"] for r in rows] == [1, 2]

"""The web page in headless Chromium: upload a workbook, run the agent, see the steps, download.

Chromium is driven with its own flags (no extra Python package): the test adds
a harness page to the app that loads ``/`` in a same-origin iframe, puts a
generated workbook into the file input, submits the form, waits for the
result and writes what the user would see into its own DOM, which
``--dump-dom`` prints.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

from fastapi.responses import HTMLResponse, Response

from tests.serve.conftest import live_server, xlsx_bytes
from tests.serve.fakes import ScriptedPolicy, tool_call, workbook_pool_factory

CHROMIUM = "/usr/bin/chromium"

HARNESS = """<!doctype html><html><body><pre id="out">pending</pre>
<iframe id="app" src="/" width="1000" height="800"></iframe>
<script>
const out = document.getElementById("out");
const frame = document.getElementById("app");
function report(obj) { out.textContent = "RESULT " + JSON.stringify(obj); }
frame.addEventListener("load", async () => {
  try {
    const doc = frame.contentDocument;
    const bytes = await (await fetch("/_test/book.xlsx")).arrayBuffer();
    const file = new File([bytes], "book.xlsx", {type: "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"});
    const dt = new DataTransfer();
    dt.items.add(file);
    doc.getElementById("file").files = dt.files;
    doc.getElementById("instruction").value = "Label column C and total B";
    doc.getElementById("max_turns").value = "4";
    doc.getElementById("run").click();
    const started = Date.now();
    const timer = setInterval(async () => {
      const status = doc.getElementById("status").textContent;
      if (doc.getElementById("result").hidden && !status.startsWith("Error") && Date.now() - started < 15000) return;
      clearInterval(timer);
      const link = doc.getElementById("download");
      let download = null;
      if (!link.hidden && link.getAttribute("href") !== "#") {
        const r = await fetch(link.href);
        const head = new Uint8Array(await r.arrayBuffer()).slice(0, 2);
        download = {status: r.status, magic: String.fromCharCode(...head)};
      }
      report({
        status: status,
        summary: doc.getElementById("summary").textContent,
        steps: [...doc.querySelectorAll("#steps .turn")].map(s => s.textContent),
        calls: [...doc.querySelectorAll("#steps pre.call")].map(p => p.textContent),
        reasoning: [...doc.querySelectorAll("#steps .turn")].map(t => {
          const d = t.querySelector("details.reasoning");
          return d ? [d.open, d.querySelector("pre").textContent] : null;
        }),
        changes: [...doc.querySelectorAll("#changes tbody tr")].map(r => [...r.cells].map(c => c.textContent)),
        href: link.getAttribute("href"),
        download: download,
      });
    }, 100);
  } catch (err) { report({error: String(err)}); }
});
</script></body></html>"""


def _chromium_dom(url: str, profile: Path) -> str:
    if not Path(CHROMIUM).exists():
        raise AssertionError(
            f"{CHROMIUM} not found: the page test needs Chromium. Install it with "
            "`apt-get update && apt-get install -y chromium` (Debian package `chromium`)."
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
        f"--user-data-dir={profile}",
        "--virtual-time-budget=30000",
        "--dump-dom",
    ]
    proc = subprocess.run(
        [CHROMIUM, *flags, url], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_page_uploads_runs_and_shows_steps_in_chromium(app_factory, tiny_policy, tmp_path):
    policy = ScriptedPolicy(
        tiny_policy[1],
        [
            tool_call("write_cell", cell="C1", value="total"),
            "<think>\nThe total of B goes under its label.\n</think>\n\n"
            + tool_call("write_cell", cell="C2", value="=SUM(B2:B4)"),
            "Done: the total is in C2.",
        ],
    )
    app = app_factory(policy=policy, pool_factory=workbook_pool_factory())
    book = xlsx_bytes()
    app.add_api_route("/_test/harness", lambda: HTMLResponse(HARNESS), methods=["GET"])
    app.add_api_route("/_test/book.xlsx", lambda: Response(book), methods=["GET"])
    with live_server(app) as url:
        dom = _chromium_dom(f"{url}/_test/harness", tmp_path / "profile")
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
    match = re.search(r"RESULT (\{.*\})</pre>", dom, re.S)
    assert match, f"the page flow did not finish; DOM was:\n{dom[:2000]}"
    seen = json.loads(html.unescape(match.group(1)))
    assert "error" not in seen, seen
    assert seen["status"] == "Done."
    assert "answered" in seen["summary"] and "2 tool call(s)" in seen["summary"]
    assert len(seen["steps"]) == 3
    assert seen["calls"] == [
        'write_cell {"cell":"C1","value":"total"}',
        'write_cell {"cell":"C2","value":"=SUM(B2:B4)"}',
    ]
    # the second turn's reasoning, collapsed, read with the tokenizer's chat format
    assert seen["reasoning"] == [None, [False, "The total of B goes under its label."], None]
    assert "wrote 'total' to C1" in seen["steps"][0]
    assert "Done: the total is in C2." in seen["steps"][2]
    assert seen["changes"] == [["Sheet1", "C1", "", "total"], ["Sheet1", "C2", "", "=SUM(B2:B4)"]]
    assert re.fullmatch(r"/v1/tasks/[0-9a-f]+/output\.xlsx", seen["href"])
    assert seen["download"] == {"status": 200, "magic": "PK"}


EXAMPLE_HARNESS = """<!doctype html><html><body><pre id="out">pending</pre>
<iframe id="app" src="/" width="1000" height="800"></iframe>
<script>
const out = document.getElementById("out");
const frame = document.getElementById("app");
function report(obj) { out.textContent = "RESULT " + JSON.stringify(obj); }
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
const gridText = (box) => [...box.querySelectorAll("table.preview tr")].map(
  (r) => [...r.children].map((c) => c.textContent));
frame.addEventListener("load", async () => {
  try {
    const doc = frame.contentDocument;
    const select = doc.getElementById("example");
    await waitFor(() => select.options.length > 1, 15000);
    select.value = select.options[1].value;
    select.dispatchEvent(new Event("change"));
    await waitFor(() => !doc.getElementById("picked").hidden, 15000);
    const picked = gridText(doc.getElementById("grid-picked"));
    doc.getElementById("temperature").value = "0.3";
    doc.getElementById("max_tokens").value = "7";
    doc.getElementById("run").click();
    await waitFor(() => !doc.getElementById("result").hidden || doc.getElementById("status").className === "error", 15000);
    const link = doc.getElementById("view-link");
    report({
      status: doc.getElementById("status").textContent,
      examples: select.options.length - 1,
      instruction: doc.getElementById("instruction").value,
      chosen: select.selectedOptions[0].dataset.instruction,
      picked: picked,
      before: gridText(doc.getElementById("grid-before")),
      after: gridText(doc.getElementById("grid-after")),
      changed: [...doc.querySelectorAll("#grid-after td.changed")].map((td) => [td.dataset.cell, td.textContent]),
      model: doc.getElementById("model-name").textContent,
      view: link ? link.getAttribute("href") : null,
    });
  } catch (err) { report({error: String(err)}); }
});
</script></body></html>"""


class RecordingPolicy(ScriptedPolicy):
    """The scripted turns, recording the sampling settings of each call."""

    def __init__(self, tokenizer, turns):
        super().__init__(tokenizer, turns)
        self.params = []

    def act(self, contexts, params, *, seeds=None):
        self.params.append(params)
        return super().act(contexts, params, seeds=seeds)


def test_page_runs_a_built_in_example_with_no_file_and_shows_before_and_after(
    app_factory, tiny_policy, tmp_path
):
    """Issue 32 item 8: an example picker, before/after grids, temperature and max-tokens
    fields, the model's name and, with --view, a link to the viewer."""
    policy = RecordingPolicy(tiny_policy[1], [tool_call("write_cell", cell="H1", value="=1+1")])
    app = app_factory(
        policy=policy, pool_factory=workbook_pool_factory(), model_name="grpo", view_url="/view/"
    )
    app.add_api_route("/_test/harness", lambda: HTMLResponse(EXAMPLE_HARNESS), methods=["GET"])
    with live_server(app) as url:
        dom = _chromium_dom(f"{url}/_test/harness", tmp_path / "profile")
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
    match = re.search(r"RESULT (\{.*\})</pre>", dom, re.S)
    assert match, f"the page flow did not finish; DOM was:\n{dom[:2000]}"
    seen = json.loads(html.unescape(match.group(1)))
    assert "error" not in seen, seen
    assert seen["status"] == "Done."
    assert seen["examples"] >= 1 and seen["instruction"] == seen["chosen"]
    assert len(seen["picked"]) > 1 and seen["before"] == seen["picked"]  # the example's book
    assert seen["changed"] == [["H1", "=1+1"]]  # the after grid marks what the agent wrote
    assert seen["after"][0][8] == "H" and seen["after"][1][8] == "=1+1"  # header row, then row 1
    assert {(p.temperature, p.max_new_tokens) for p in policy.params} == {(0.3, 7)}
    assert seen["model"] == "grpo" and seen["view"] == "/view/"

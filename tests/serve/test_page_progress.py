"""The serve page on the real gym in headless Chromium: the preset select, the progress view
while the agent works, and the shared turn-by-turn view with its cell grid.

The policy holds its second turn until the page has shown the first tool call in the
progress view, so the test sees the page mid-run. No virtual time: the harness page
stays loading (a script the server answers only once the harness has reported) and
Chromium takes its screenshot when the load finishes.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from pathlib import Path

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from tests.serve.conftest import live_server, xlsx_bytes
from tests.serve.fakes import ScriptedPolicy, tool_call
from tests.serve.test_page import CHROMIUM
from tests.serve.test_view import ARTIFACTS


class HeldSecondTurn:
    """A token-level policy whose second turn waits for ``release``."""

    token_level = True
    streaming = False
    seeds_per_context = False
    max_context_tokens = 0

    def __init__(self, policy) -> None:
        self.policy = policy
        self.release = threading.Event()
        self.calls = 0

    def act(self, contexts, params, *, seeds=None):
        self.calls += 1
        if self.calls == 2 and not self.release.wait(timeout=60):
            raise RuntimeError("the page never saw the first tool call")
        return self.policy.act(contexts, params, seeds=seeds)


HARNESS = """<!doctype html><html><body style="margin:0">
<iframe id="app" src="/" width="1100" height="1300" style="border:0"></iframe>
<script>
const frame = document.getElementById("app");
const report = (obj) => fetch("/_test/result", {method: "POST", body: JSON.stringify(obj)});
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
    const presets = [...doc.querySelectorAll("#preset option")].map((o) => o.value);
    doc.getElementById("preset").value = "full";
    const bytes = await (await fetch("/_test/book.xlsx")).arrayBuffer();
    const dt = new DataTransfer();
    dt.items.add(new File([bytes], "book.xlsx"));
    doc.getElementById("file").files = dt.files;
    doc.getElementById("instruction").value = "Label C1 and total B into C2";
    doc.getElementById("run").click();
    await waitFor(() => doc.querySelector("#progress-events .cell-grid td.changed"), 20000);
    const progress = {
      visible: !doc.getElementById("progress").hidden,
      calls: [...doc.querySelectorAll("#progress-events pre.call")].map((p) => p.textContent),
      grid: [...doc.querySelectorAll("#progress-events td.changed")].map((td) => td.dataset.cell),
      resultHidden: doc.getElementById("result").hidden,
    };
    await fetch("/_test/release");
    await waitFor(() => doc.getElementById("status").textContent === "Done.", 20000);
    report({
      presets: presets,
      progress: progress,
      progressHiddenAfter: doc.getElementById("progress").hidden,
      turns: doc.querySelectorAll("#steps .turn").length,
      grid: [...doc.querySelectorAll("#steps table.cell-grid td.changed")].map(
        (td) => [td.dataset.cell, td.querySelector(".after").textContent]),
      summary: doc.getElementById("summary").textContent,
    });
  } catch (err) { report({error: String(err)}); }
});
</script>
<script src="/_test/hold-load"></script>
</body></html>"""


def test_page_shows_progress_then_the_turns_with_a_cell_grid(app_factory, tiny_policy, tmp_path):
    held = HeldSecondTurn(
        ScriptedPolicy(
            tiny_policy[1],
            [
                tool_call("write_range", range="C1:C2", values=[["total"], ["=SUM(B2:B4)"]]),
                "The total is in C2.",
            ],
        )
    )
    app = app_factory(policy=held, pool_factory=None, env_workers=0)
    results: list[dict] = []
    reported = threading.Event()

    async def record(request: Request) -> Response:
        import json

        results.append(json.loads(await request.body()))
        reported.set()
        return Response("ok")

    async def hold_load() -> Response:
        await asyncio.to_thread(reported.wait, 60)
        return Response("", media_type="text/javascript")

    async def release() -> Response:
        held.release.set()
        return Response("ok")

    book = xlsx_bytes()
    app.add_api_route("/_test/harness", lambda: HTMLResponse(HARNESS), methods=["GET"])
    app.add_api_route("/_test/book.xlsx", lambda: Response(book), methods=["GET"])
    app.add_api_route("/_test/result", record, methods=["POST"])
    app.add_api_route("/_test/hold-load", hold_load, methods=["GET"])
    app.add_api_route("/_test/release", release, methods=["GET"])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "serve-page.png"
    shot.unlink(missing_ok=True)
    profile = tmp_path / "profile"
    with live_server(app) as url:
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
            "--window-size=1100,1300",
            f"--screenshot={shot}",
        ]
        if not Path(CHROMIUM).exists():
            raise AssertionError(f"{CHROMIUM} not found: install it with `make sysdeps`")
        proc = subprocess.run(
            [CHROMIUM, *flags, f"{url}/_test/harness"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        held.release.set()  # never leave the server thread waiting
    shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert results, "the harness never reported"
    seen = results[0]
    assert "error" not in seen, seen
    assert seen["presets"] == ["minimal", "full", "spreadsheet-rl", "spreadsheet-rl-2606"]
    # mid-run: the first call, its observation and its cells, before any result
    assert seen["progress"]["visible"] and seen["progress"]["resultHidden"]
    assert seen["progress"]["calls"][0].startswith("1. write_range ")
    assert seen["progress"]["grid"] == ["C1", "C2"]
    assert seen["progressHiddenAfter"]
    assert seen["turns"] == 2
    assert seen["grid"] == [["C1", "total"], ["C2", "=SUM(B2:B4)"]]
    assert "answered" in seen["summary"]
    assert shot.is_file() and shot.stat().st_size > 5_000

"""The web page served at ``/``: upload a workbook, give an instruction, watch the agent work.

One HTML string with vanilla JavaScript (no build step). The form posts to
``POST /v1/tasks`` with a random ``progress_id`` and, while the request runs,
polls ``GET /v1/tasks/progress/{id}`` to show each tool call, its observation
and the cells it changed as they happen. The finished result is drawn by the
turn-by-turn trajectory component that ``spreadrl view`` uses too
(``/static/trajectory.js`` and ``.css``). Model and tool text is inserted with
``textContent``, never as HTML.
"""

from __future__ import annotations

import html

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>spreadrl agent</title>
<link rel="stylesheet" href="/static/trajectory.css">
<style>
  body { font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222; }
  h1 { font-size: 1.4em; }
  form { display: grid; gap: .6em; grid-template-columns: 9em 1fr; align-items: center; }
  textarea { min-height: 4em; }
  button { grid-column: 2; justify-self: start; padding: .4em 1.2em; }
  #status { margin: 1em 0; font-weight: 600; }
  #status.error { color: #b00020; }
  #progress { border: 1px dashed #aac; border-radius: 6px; padding: .5em .8em; margin: .6em 0; }
  #progress h2 { font-size: 1em; margin: 0 0 .3em; }
  #progress .event { margin: .4em 0; }
  #progress pre { background: #f6f6f6; padding: .3em .5em; margin: .2em 0; white-space: pre-wrap; font-size: .85em; }
  table.changes { border-collapse: collapse; margin: .6em 0; }
  table.changes td, table.changes th { border: 1px solid #ccc; padding: .2em .6em; text-align: left; }
</style>
</head>
<body>
<h1>spreadrl spreadsheet agent</h1>
<form id="task-form">
  <label for="file">Workbook (.xlsx)</label>
  <input id="file" name="file" type="file" accept=".xlsx,.xlsm" required>
  <label for="instruction">Instruction</label>
  <textarea id="instruction" name="instruction" required placeholder="e.g. Put the total of column B in B10"></textarea>
  <label for="max_turns">Max turns</label>
  <input id="max_turns" name="max_turns" type="number" min="1" max="100" value="8">
  <label for="preset">Tool preset</label>
  <select id="preset" name="preset">@PRESET_OPTIONS@</select>
  <button id="run" type="submit">Run agent</button>
</form>
<div id="status" role="status"></div>
<section id="progress" hidden>
  <h2>Working: <span id="progress-summary"></span></h2>
  <div id="progress-events"></div>
</section>
<section id="result" hidden>
  <h2>Result</h2>
  <p id="summary"></p>
  <p><a id="download" href="#" download>Download the edited workbook</a></p>
  <h2>Changed cells</h2>
  <table id="changes" class="changes"><thead><tr><th>sheet</th><th>cell</th><th>before</th><th>after</th></tr></thead><tbody></tbody></table>
  <h2>Agent steps</h2>
  <div id="steps"></div>
</section>
<script src="/static/trajectory.js"></script>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const el = SpreadrlTrajectory.el;

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function newProgressId() {
  const bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function renderProgress(snap) {
  $("progress-summary").textContent = snap.events.length + " tool call(s), " + snap.elapsed_s.toFixed(1) + " s";
  const box = $("progress-events");
  box.replaceChildren();
  snap.events.forEach((e, i) => {
    const item = el("div", null, "event");
    item.appendChild(el("pre", (i + 1) + ". " + e.call.name + " " + JSON.stringify(e.call.arguments), "call"));
    if (e.observation === null) item.appendChild(el("p", "running...", "note"));
    else item.appendChild(el("pre", e.observation, "obs"));
    if (e.changed_cells) item.appendChild(SpreadrlTrajectory.cellGrid(e.changed_cells));
    box.appendChild(item);
  });
}

async function pollProgress(id, isDone) {
  while (!isDone()) {
    try {
      const r = await fetch("/v1/tasks/progress/" + id);
      if (r.ok) {
        const snap = await r.json();
        if (!isDone()) { renderProgress(snap); $("progress").hidden = false; }
        if (snap.status === "done") return;
      }
    } catch (err) { /* the page keeps waiting for the task itself */ }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}

function render(data) {
  $("summary").textContent = "Stopped: " + data.stop_reason + " after " + data.turns +
    " turn(s), " + data.tool_calls + " tool call(s)" + (data.error ? " (error: " + data.error + ")" : "");
  const link = $("download");
  if (data.output_url) { link.href = data.output_url; link.hidden = false; } else { link.hidden = true; }
  const body = $("changes").querySelector("tbody");
  body.replaceChildren();
  const cells = (data.changes && data.changes.cells) || [];
  for (const c of cells) {
    const row = el("tr");
    for (const v of [c.sheet, c.cell, c.before, c.after]) row.appendChild(el("td", v === null ? "" : v));
    body.appendChild(row);
  }
  if (!cells.length) {
    const row = el("tr"); const cell = el("td", "no cell changed"); cell.colSpan = 4;
    row.appendChild(cell); body.appendChild(row);
  }
  SpreadrlTrajectory.render($("steps"), { messages: data.messages, metadata: { cell_changes: data.cell_changes || {}, assistant_turns: data.assistant_turns || {} } });
  $("result").hidden = false;
}

$("task-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData($("task-form"));
  const progressId = newProgressId();
  form.set("progress_id", progressId);
  $("run").disabled = true;
  $("result").hidden = true;
  $("progress-events").replaceChildren();
  $("progress-summary").textContent = "starting";
  $("progress").hidden = false;
  setStatus("Running the agent...", false);
  let finished = false;
  const polling = pollProgress(progressId, () => finished);
  try {
    const response = await fetch("/v1/tasks", { method: "POST", body: form });
    const data = await response.json();
    finished = true;
    $("progress").hidden = true;
    if (!response.ok) {
      const message = (data && data.error && data.error.message) || response.statusText;
      setStatus("Error " + response.status + ": " + message, true);
      return;
    }
    render(data);
    setStatus("Done.", false);
  } catch (err) {
    setStatus("Request failed: " + err, true);
  } finally {
    finished = true;
    await polling;
    $("progress").hidden = true;
    $("run").disabled = false;
  }
});
</script>
</body>
</html>
"""


def index_html(default_preset: str = "full") -> str:
    """The page, with a select of the gym's tool presets (the server's default selected)."""
    from spreadrl.env.tools import PRESETS

    names = list(PRESETS)
    if default_preset not in names:
        names.insert(0, default_preset)  # a server started with a custom tool list
    options = "".join(
        f'<option value="{html.escape(n)}"{" selected" if n == default_preset else ""}>'
        f"{html.escape(n)}</option>"
        for n in names
    )
    return _PAGE.replace("@PRESET_OPTIONS@", options)

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
  #model-line { color: #555; margin-top: -.6em; }
  .grids { display: flex; gap: 1.5em; flex-wrap: wrap; align-items: flex-start; }
  table.preview { border-collapse: collapse; font-size: .8em; }
  table.preview td, table.preview th { border: 1px solid #ddd; padding: .1em .4em; max-width: 12em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  table.preview th { background: #f3f3f3; color: #666; font-weight: normal; }
  table.preview td.changed { background: #fff3c4; }
</style>
</head>
<body>
<h1>spreadrl spreadsheet agent</h1>
<p id="model-line">Model: <b id="model-name">@MODEL_NAME@</b>@VIEW_LINK@</p>
<form id="task-form">
  <label for="example">Example task</label>
  <select id="example"><option value="">(your own workbook below)</option></select>
  <label for="file">Workbook (.xlsx)</label>
  <input id="file" name="file" type="file" accept=".xlsx,.xlsm">
  <label for="instruction">Instruction</label>
  <textarea id="instruction" name="instruction" required placeholder="e.g. Put the total of column B in B10"></textarea>
  <label for="max_turns">Max turns</label>
  <input id="max_turns" name="max_turns" type="number" min="1" max="100" value="8">
  <label for="preset">Tool preset</label>
  <select id="preset" name="preset">@PRESET_OPTIONS@</select>
  <label for="temperature">Temperature</label>
  <input id="temperature" name="temperature" type="number" min="0" max="2" step="0.1" value="0.6">
  <label for="max_tokens">Max tokens per turn</label>
  <input id="max_tokens" name="max_tokens" type="number" min="1" placeholder="server default (@MAX_TOKENS@)">
  <button id="run" type="submit">Run agent</button>
</form>
<div id="status" role="status"></div>
<section id="picked" hidden><h2>Workbook</h2><div id="grid-picked"></div></section>
<section id="progress" hidden>
  <h2>Working: <span id="progress-summary"></span></h2>
  <div id="progress-events"></div>
</section>
<section id="result" hidden>
  <h2>Result</h2>
  <p id="summary"></p>
  <p><a id="download" href="#" download>Download the edited workbook</a></p>
  <div class="grids">
    <div><h2>Before</h2><div id="grid-before"></div></div>
    <div><h2>After</h2><div id="grid-after"></div></div>
  </div>
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

const COLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

/* A preview grid ({sheet, rows}) as a table; cells that differ from `before` are marked. */
function grid(preview, before) {
  if (!preview) return el("p", "no output workbook", "note");
  if (preview.error) return el("p", preview.error, "note");
  const table = el("table", null, "preview");
  table.dataset.sheet = preview.sheet;
  const head = el("tr");
  head.appendChild(el("th", preview.sheet));
  const width = Math.max(0, ...preview.rows.map((r) => r.length));
  for (let c = 0; c < width; c++) head.appendChild(el("th", COLS[c] || "?"));
  table.appendChild(head);
  preview.rows.forEach((row, r) => {
    const tr = el("tr");
    tr.appendChild(el("th", String(r + 1)));
    for (let c = 0; c < width; c++) {
      const text = row[c] === undefined ? "" : row[c];
      const td = el("td", text);
      td.dataset.cell = (COLS[c] || "?") + (r + 1);
      const old = before && before.rows && before.rows[r] ? before.rows[r][c] || "" : "";
      if (before && !before.error && old !== text) td.className = "changed";
      tr.appendChild(td);
    }
    table.appendChild(tr);
  });
  return table;
}

async function loadExamples() {
  try {
    const r = await fetch("/v1/examples");
    if (!r.ok) return;
    for (const ex of (await r.json()).data) {
      const o = el("option", ex.id + ": " + ex.instruction);
      o.value = ex.id;
      o.dataset.instruction = ex.instruction;
      $("example").appendChild(o);
    }
  } catch (err) { /* the page works without examples */ }
}

$("example").addEventListener("change", async () => {
  const chosen = $("example").selectedOptions[0];
  $("picked").hidden = true;
  if (!chosen.value) return;
  $("instruction").value = chosen.dataset.instruction;
  const r = await fetch("/v1/examples/" + encodeURIComponent(chosen.value) + "/preview");
  if (r.ok && $("example").value === chosen.value) {
    $("grid-picked").replaceChildren(grid(await r.json(), null));
    $("picked").hidden = false;
  }
});

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
  const preview = data.preview || {};
  $("grid-before").replaceChildren(grid(preview.before, null));
  $("grid-after").replaceChildren(grid(preview.after, preview.before));
  SpreadrlTrajectory.render($("steps"), { messages: data.messages, metadata: { cell_changes: data.cell_changes || {}, assistant_turns: data.assistant_turns || {} } });
  $("result").hidden = false;
}

$("task-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData($("task-form"));
  if (!form.get("max_tokens")) form.delete("max_tokens");  // the server's default
  const example = $("example").value;
  if (!$("file").files.length) {
    if (!example) { setStatus("Choose a workbook, or pick an example task.", true); return; }
    const r = await fetch("/v1/examples/" + encodeURIComponent(example) + "/input.xlsx");
    form.set("file", await r.blob(), example + ".xlsx");
  }
  $("picked").hidden = true;
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
    // an episode that never took a turn is no result: say why instead of "Done."
    if (data.turns) setStatus("Done.", false);
    else setStatus("The agent never started (" + data.stop_reason + ").", true);
  } catch (err) {
    setStatus("Request failed: " + err, true);
  } finally {
    finished = true;
    await polling;
    $("progress").hidden = true;
    $("run").disabled = false;
  }
});
loadExamples();
</script>
</body>
</html>
"""


def index_html(
    default_preset: str = "full",
    model_name: str = "spreadrl",
    view_url: str | None = None,
    default_max_tokens: int = 256,
) -> str:
    """The page: the served model's name, a link to the run viewer when one is served,
    and a select of the gym's tool presets (the server's default selected)."""
    from spreadrl.env.spreadsheet.tools import PRESETS

    names = list(PRESETS)
    if default_preset not in names:
        names.insert(0, default_preset)  # a server started with a custom tool list
    options = "".join(
        f'<option value="{html.escape(n)}"{" selected" if n == default_preset else ""}>'
        f"{html.escape(n)}</option>"
        for n in names
    )
    link = (
        f' &middot; <a id="view-link" href="{html.escape(view_url)}">training run viewer</a>'
        if view_url
        else ""
    )
    return (
        _PAGE.replace("@PRESET_OPTIONS@", options)
        .replace("@MODEL_NAME@", html.escape(model_name))
        .replace("@VIEW_LINK@", link)
        .replace("@MAX_TOKENS@", str(int(default_max_tokens)))
    )

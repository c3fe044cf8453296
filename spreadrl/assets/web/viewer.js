/* spreadrl view: curves from metrics.jsonl (uPlot), eval reports side by side, and the
   trajectory browser (the shared SpreadrlTrajectory component). Reads the JSON API of
   spreadrl/serve/view.py, relative to this page. */
"use strict";

const $ = (id) => document.getElementById(id);
const el = SpreadrlTrajectory.el;
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
// Each chart holds one unit: a seconds key ends "_s", a rate "_per_s" (tokens_per_s once
// landed on the seconds axis because it too ends "_s").
const isRate = (k) => k.endsWith("_per_s");
const GROUPS = [
  ["Reward (mean, and its parts)", (k) => k === "reward_mean" || k.startsWith("reward/")],
  ["Pass rate", (k) => k === "pass_rate"],
  ["Response length (tokens)", (k) => k === "response_tokens" || k === "generated_tokens"],
  ["Tool calls per episode", (k) => k === "tool_calls" || k === "parse_errors"],
  ["KL to the reference", (k) => k === "kl"],
  ["Entropy", (k) => k === "entropy"],
  ["Clip fraction", (k) => k.startsWith("clip_frac")],
  ["Time per step (s)", (k) => k.endsWith("_s") && !isRate(k)],
  ["Throughput (per second)", (k) => isRate(k)],
  ["Loss", (k) => k === "loss" || k.endsWith("_loss")],
];
window.spreadrlCharts = [];  // the drawn uPlot charts (the browser test reads their series)

async function getJSON(url) {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error((body && body.detail) || r.statusText);
  return body;
}

function fillSelect(select, names, withNone) {
  select.replaceChildren();
  if (withNone) select.appendChild(el("option", "(none)"));
  if (withNone) select.lastChild.value = "";
  for (const n of names) { const o = el("option", n); o.value = n; select.appendChild(o); }
}

function fmt(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(Math.abs(v) < 10 ? 4 : 2);
  return String(v);
}

/* ---- curves ---------------------------------------------------------- */
// Exponential moving average with TensorBoard's debiasing, so the first points are not
// pulled towards 0; gaps (null) stay gaps.
function smooth(values, weight) {
  if (!weight) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (v === null) return null;
    last = last * weight + (1 - weight) * v;
    n += 1;
    return last / (1 - Math.pow(weight, n));
  });
}

function chart(title, series, parent, weight) {
  const box = el("div", null, "chart");
  box.dataset.title = title;
  parent.appendChild(box);
  const xs = [...new Set(series.flatMap((s) => s.rows.map((r) => r.step)))].sort((a, b) => a - b);
  const data = [xs, ...series.map((s) => {
    const byStep = new Map(s.rows.map((r) => [r.step, typeof r[s.key] === "number" ? r[s.key] : null]));
    return smooth(xs.map((x) => (byStep.has(x) ? byStep.get(x) : null)), weight);
  })];
  const lines = [{ label: "step" }, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true }))];
  const width = Math.max(320, box.clientWidth - 12);
  const steps = { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000] };  // whole steps
  const plot = new uPlot({ title: title, width: width, height: 220, scales: { x: { time: false } }, axes: [steps, { size: 64 }], series: lines }, data, box);
  window.spreadrlCharts.push({ title: title, keys: series.map((s) => s.key), labels: series.map((s) => s.label), data: plot.data });
}

const metricRows = new Map();  // run -> its rows, fetched once per page load

async function rowsOf(run) {
  if (!metricRows.has(run)) {
    const rows = (await getJSON("api/metrics?run=" + encodeURIComponent(run))).rows.filter((r) => typeof r.step === "number");
    metricRows.set(run, rows);
  }
  return metricRows.get(run);
}

function checkedRuns() {
  return [...document.querySelectorAll("#metrics-runs input:checked")].map((c) => c.value);
}

async function loadMetrics() {
  const charts = $("charts");
  const runs = checkedRuns();
  const weight = Number($("smooth").value);
  $("smooth-value").textContent = weight.toFixed(2);
  charts.replaceChildren();
  window.spreadrlCharts = [];
  if (!runs.length) { charts.appendChild(el("p", "No metrics.jsonl in this run folder.", "empty")); return; }
  const byRun = await Promise.all(runs.map(async (run) => [run, await rowsOf(run)]));
  const keys = [...new Set(byRun.flatMap(([, rows]) => rows.flatMap((r) => Object.keys(r).filter((k) => k !== "step" && typeof r[k] === "number"))))];
  if (!keys.length) { charts.appendChild(el("p", "metrics.jsonl is empty.", "empty")); return; }
  // one series per (run, key); a run's name prefixes its label once several are overlaid
  const seriesOf = (group) => byRun.flatMap(([run, rows]) => group
    .filter((k) => rows.some((r) => typeof r[k] === "number"))
    .map((k) => ({ key: k, rows: rows, label: runs.length > 1 ? run + ": " + k : k })));
  const used = new Set();
  for (const [title, match] of GROUPS) {
    const group = keys.filter((k) => !used.has(k) && match(k));
    group.forEach((k) => used.add(k));
    if (group.length) chart(title, seriesOf(group), charts, weight);
  }
  for (const k of keys.filter((k) => !used.has(k))) chart(k, seriesOf([k]), charts, weight);
  await loadConfigs(runs);
}

async function loadConfigs(runs) {
  const box = $("configs");
  box.replaceChildren();
  for (const run of runs) {
    let text;
    try { text = (await getJSON("api/config?run=" + encodeURIComponent(run))).text; } catch (e) { continue; }
    const details = el("details", null, "config");
    details.dataset.run = run;
    details.appendChild(el("summary", "config.yaml of " + run));
    details.appendChild(el("pre", text));
    box.appendChild(details);
  }
}

function runCheckboxes(runs, checked) {
  const box = $("metrics-runs");
  box.replaceChildren();
  for (const run of runs) {
    const label = el("label", null);
    const input = el("input", null);
    input.type = "checkbox";
    input.value = run;
    input.checked = run === checked;
    input.addEventListener("change", () => loadMetrics());
    label.appendChild(input);
    label.appendChild(document.createTextNode(run));
    box.appendChild(label);
  }
}

/* ---- eval reports ---------------------------------------------------- */
function reportRows(a, b) {
  const rows = [];
  const keys = [...new Set([...Object.keys(a || {}), ...Object.keys(b || {})])];
  for (const k of keys) {
    const va = a ? a[k] : undefined, vb = b ? b[k] : undefined;
    const sample = va !== undefined ? va : vb;
    if (typeof sample === "number") rows.push([k, va, vb]);
    else if (sample && typeof sample === "object" && !k.startsWith("by_") && k !== "per_case") {
      for (const sub of new Set([...Object.keys(va || {}), ...Object.keys(vb || {})])) {
        const x = va ? va[sub] : undefined, y = vb ? vb[sub] : undefined;
        if (typeof x === "number" || typeof y === "number") rows.push([k + " " + sub, x, y]);
      }
    }
  }
  return rows;
}

function table(head, rows, id) {
  const t = el("table", null, "data");
  if (id) t.id = id;
  const tr = el("tr");
  head.forEach((h) => tr.appendChild(el("th", h)));
  t.appendChild(tr);
  for (const row of rows) {
    const r = el("tr");
    row.forEach((v, i) => {
      const td = el("td", fmt(v), i ? "num" : "");
      if (i === 3 && typeof v === "number" && v !== 0) td.classList.add(v > 0 ? "up" : "down");
      r.appendChild(td);
    });
    t.appendChild(r);
  }
  return t;
}

async function loadReports() {
  const box = $("report");
  const ra = $("report-a").value, rb = $("report-b").value;
  box.replaceChildren();
  if (!ra && !rb) { box.appendChild(el("p", "No report.json in this run folder.", "empty")); return; }
  const a = ra ? (await getJSON("api/report?run=" + encodeURIComponent(ra))).report : null;
  const b = rb ? (await getJSON("api/report?run=" + encodeURIComponent(rb))).report : null;
  const two = a && b;
  for (const [name, rep] of [[ra, a], [rb, b]]) {
    if (rep && rep.complete === false) {  // an eval stopped by Ctrl-C: its report covers some episodes
      box.appendChild(el("p", `${name} is a stopped eval: ${rep.episodes} of ${rep.episodes_planned} ` +
        "episodes; the same eval command finishes it", "stopped"));
    }
  }
  const head = two ? ["metric", "A: " + ra, "B: " + rb, "B - A"] : ["metric", ra || rb];
  const rows = reportRows(a || b, two ? b : null).map(([k, x, y]) =>
    two ? [k, x, y, typeof x === "number" && typeof y === "number" ? y - x : null] : [k, x]);
  box.appendChild(table(head, rows, "report-table"));
  for (const key of Object.keys(a || b).filter((k) => k.startsWith("by_"))) {
    const groups = [...new Set([...Object.keys((a || {})[key] || {}), ...Object.keys((b || {})[key] || {})])];
    if (!groups.length) continue;
    box.appendChild(el("h3", "pass@1 " + key.replace("by_", "by ").replace("_", " ")));
    const rowsBy = groups.map((g) => {
      const x = a && a[key] && a[key][g] ? a[key][g]["pass@1"] : null;
      const y = b && b[key] && b[key][g] ? b[key][g]["pass@1"] : null;
      return two ? [g, x, y, x !== null && y !== null ? y - x : null] : [g, x !== null ? x : y];
    });
    box.appendChild(table(two ? ["group", "A", "B", "B - A"] : ["group", "pass@1"], rowsBy));
  }
  if (two && a.per_case && b.per_case) {
    const cases = Object.keys(a.per_case).filter((c) => c in b.per_case);
    const up = cases.filter((c) => b.per_case[c] > a.per_case[c]).length;
    const down = cases.filter((c) => b.per_case[c] < a.per_case[c]).length;
    box.appendChild(el("p", cases.length + " cases in both: " + up + " better in B, " + down + " worse"));
  }
}

/* ---- trajectories ---------------------------------------------------- */
function filterQuery() {
  const q = new URLSearchParams();
  q.set("run", $("traj-run").value);
  const fields = [["step", "traj-step"], ["task", "traj-task"], ["min_reward", "traj-min"], ["max_reward", "traj-max"], ["passed", "traj-passed"]];
  for (const [name, id] of fields) if ($(id).value !== "") q.set(name, $(id).value);
  return q.toString();
}

async function loadTrajectories(resetSteps) {
  const list = $("traj-list");
  const run = $("traj-run").value;
  if (!run) return;
  if (resetSteps) $("traj-step").value = "";
  const data = await getJSON("api/trajectories?" + filterQuery());
  if (resetSteps) {
    const keep = $("traj-step").value;
    fillSelect($("traj-step"), data.steps.map(String), true);
    $("traj-step").firstChild.textContent = "all";
    $("traj-step").value = keep;
  }
  $("traj-count").textContent = data.matched + " of " + data.total + " shown";
  list.replaceChildren();
  const t = el("table", null, "data");
  const head = el("tr");
  ["step", "task", "case/sample", "reward", "outcome", "turns", "calls", "cells", "stop"].forEach((h) => head.appendChild(el("th", h)));
  const thead = el("thead"); thead.appendChild(head); t.appendChild(thead);
  const body = el("tbody");
  for (const item of data.items) {
    const tr = el("tr");
    tr.dataset.index = String(item.index);
    const cells = [item.step, item.task_id, item.case + "/" + item.sample, item.reward, item.passed ? "pass" : "fail",
      item.turns, item.tool_calls, item.changed_cells, item.stop_reason];
    cells.forEach((v, i) => {
      const td = el("td", fmt(v), [3, 5, 6, 7].includes(i) ? "num" : "");
      if (i === 4) td.className = item.passed ? "pass" : "fail";
      tr.appendChild(td);
    });
    tr.addEventListener("click", () => openTrajectory(run, item.index, tr));
    body.appendChild(tr);
  }
  t.appendChild(body);
  list.appendChild(t);
}

async function openTrajectory(run, index, row) {
  for (const r of document.querySelectorAll("#traj-list tr.selected")) r.classList.remove("selected");
  if (row) row.classList.add("selected");
  const traj = (await getJSON("api/trajectory?run=" + encodeURIComponent(run) + "&index=" + index)).trajectory;
  const detail = $("traj-detail");
  detail.replaceChildren();
  const parts = traj.reward_parts ? Object.entries(traj.reward_parts).map(([k, v]) => k + " " + fmt(v)).join(", ") : "";
  const head = el("p", null);
  head.id = "traj-head";
  head.append(
    el("strong", traj.task_id + " case " + traj.case + " sample " + traj.sample + (traj.step !== undefined ? " (step " + traj.step + ")" : "") + ": "),
    el("span", traj.passed ? "passed" : "failed", traj.passed ? "pass" : "fail"),
    el("span", ", reward " + fmt(traj.reward) + (parts ? " (" + parts + ")" : "") + ", stop " + traj.stop_reason +
      (traj.mismatches && traj.mismatches.length ? ", " + traj.mismatches.length + " answer cells wrong" : "") +
      (traj.error ? ", error: " + traj.error : "")));
  detail.appendChild(head);
  const turns = el("div");
  turns.id = "traj-turns";
  detail.appendChild(turns);
  SpreadrlTrajectory.render(turns, traj);
}

/* ---- start ----------------------------------------------------------- */
async function main() {
  const info = await getJSON("api/runs");
  $("root").textContent = info.root;
  const withFile = (f) => info.runs.filter((r) => r[f]).map((r) => r.name);
  const metricRuns = withFile("metrics.jsonl"), trajRuns = withFile("trajectories.jsonl");
  const reportRuns = info.runs.filter((r) => r["report.json"]).sort((a, b) => a.report_mtime - b.report_mtime).map((r) => r.name);
  fillSelect($("report-a"), reportRuns, true);
  fillSelect($("report-b"), reportRuns, true);
  // the two newest reports, older as A: the demo's eval before and after RL
  if (reportRuns.length) $("report-a").value = reportRuns[Math.max(0, reportRuns.length - 2)];
  if (reportRuns.length > 1) $("report-b").value = reportRuns[reportRuns.length - 1];
  fillSelect($("traj-run"), trajRuns, false);
  const grpo = metricRuns.find((n) => trajRuns.includes(n));  // a training run with samples
  runCheckboxes(metricRuns, grpo || metricRuns[0]);
  if (grpo) $("traj-run").value = grpo;
  $("smooth").addEventListener("input", () => loadMetrics());
  $("report-a").addEventListener("change", loadReports);
  $("report-b").addEventListener("change", loadReports);
  $("traj-run").addEventListener("change", () => loadTrajectories(true));
  $("traj-filters").addEventListener("input", (e) => { if (e.target.id !== "traj-run") loadTrajectories(false); });
  $("traj-filters").addEventListener("submit", (e) => { e.preventDefault(); loadTrajectories(false); });
  await Promise.all([loadMetrics(), loadReports(), loadTrajectories(true)]);
  document.body.dataset.ready = "1";
}

main().catch((err) => {
  document.body.dataset.ready = "error";
  const p = el("p", "could not load the run: " + err, "fail");
  p.id = "load-error";
  document.querySelector("main").prepend(p);
});

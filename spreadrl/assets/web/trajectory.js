/* The turn-by-turn trajectory view with before/after cell grids, shared by the run viewer
   (spreadrl view) and the serve page. Model and tool text is hostile input: everything is
   inserted with textContent, never as HTML. */
"use strict";

const SpreadrlTrajectory = (() => {
  const TOOL_CALL = /<tool_call>([\s\S]*?)<\/tool_call>/g;
  const MAX_GRID_ROWS = 12;
  const MAX_GRID_COLS = 8;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  /* Split an assistant message into its free text and its <tool_call> blocks. */
  function parseAssistant(content) {
    const calls = [];
    const text = String(content || "").replace(TOOL_CALL, (_, body) => {
      const raw = body.trim();
      try {
        const obj = JSON.parse(raw);
        calls.push({ name: obj.name, arguments: obj.arguments, raw: raw });
      } catch (err) {
        calls.push({ name: null, arguments: null, raw: raw });
      }
      return "";
    });
    return { text: text.trim(), calls: calls };
  }

  function columnIndex(letters) {
    let n = 0;
    for (const ch of letters) n = n * 26 + (ch.charCodeAt(0) - 64);
    return n;
  }

  function columnLetters(n) {
    let s = "";
    while (n > 0) { const m = (n - 1) % 26; s = String.fromCharCode(65 + m) + s; n = Math.floor((n - 1) / 26); }
    return s;
  }

  function show(value) {
    return value === null || value === undefined ? "" : String(value);
  }

  function valueCell(td, change) {
    td.className = "changed";
    td.dataset.cell = change.cell;
    td.title = change.sheet + "!" + change.cell + ": " + show(change.before) + " \u2192 " + show(change.after);
    const before = el("div", show(change.before) || "\u2205", show(change.before) ? "before" : "before empty");
    const after = el("div", show(change.after) || "\u2205", "after");
    td.append(before, after);
  }

  /* A small before/after grid per sheet for the cells one tool call changed
     (a plain list when they spread over a range too big for a grid). */
  function cellGrid(changes) {
    const box = el("div", null, "cell-changes");
    if (!changes) return box;
    if (changes.skipped) { box.appendChild(el("p", "cells not tracked: " + changes.skipped, "note")); return box; }
    const cells = changes.cells || [];
    const shown = cells.length < changes.total ? " (first " + cells.length + " shown)" : "";
    box.appendChild(el("p", changes.total + " cell" + (changes.total === 1 ? "" : "s") + " changed" + shown, "note"));
    const bySheet = new Map();
    for (const c of cells) {
      if (!bySheet.has(c.sheet)) bySheet.set(c.sheet, []);
      bySheet.get(c.sheet).push(c);
    }
    for (const [sheet, list] of bySheet) {
      const parsed = list.map((c) => {
        const m = /^([A-Z]+)(\d+)$/.exec(c.cell) || ["", "A", "1"];
        return { change: c, col: columnIndex(m[1]), row: Number(m[2]) };
      });
      const rows = parsed.map((p) => p.row), cols = parsed.map((p) => p.col);
      const r0 = Math.min(...rows), r1 = Math.max(...rows), c0 = Math.min(...cols), c1 = Math.max(...cols);
      const table = el("table", null, "cell-grid");
      table.dataset.sheet = sheet;
      const caption = el("caption", sheet);
      table.appendChild(caption);
      if (r1 - r0 < MAX_GRID_ROWS && c1 - c0 < MAX_GRID_COLS) {
        const head = el("tr");
        head.appendChild(el("th", ""));
        for (let c = c0; c <= c1; c++) head.appendChild(el("th", columnLetters(c)));
        table.appendChild(head);
        const at = new Map(parsed.map((p) => [p.row + ":" + p.col, p.change]));
        for (let r = r0; r <= r1; r++) {
          const tr = el("tr");
          tr.appendChild(el("th", r));
          for (let c = c0; c <= c1; c++) {
            const td = el("td");
            const change = at.get(r + ":" + c);
            if (change) valueCell(td, change);
            tr.appendChild(td);
          }
          table.appendChild(tr);
        }
      } else {
        const head = el("tr");
        for (const h of ["cell", "before \u2192 after"]) head.appendChild(el("th", h));
        table.appendChild(head);
        for (const p of parsed) {
          const tr = el("tr");
          tr.appendChild(el("th", p.change.cell));
          const td = el("td");
          valueCell(td, p.change);
          tr.appendChild(td);
          table.appendChild(tr);
        }
      }
      box.appendChild(table);
    }
    return box;
  }

  function callText(call) {
    if (call.name === null) return "unparsed tool call: " + call.raw;
    return call.name + " " + JSON.stringify(call.arguments);
  }

  /* One assistant turn as shown. Files from a rollout carry its own reading of each turn
     (metadata.assistant_turns: content, reasoning_content, tool_calls, errors), split with
     the markers of the model's chat template, which this page cannot know. Older files
     have only the message: its <tool_call> blocks are parsed here and its
     reasoning_content field, when present, is the reasoning. */
  function assistantTurn(message, known) {
    if (known) {
      return {
        reasoning: known.reasoning_content || null,
        text: String(known.content || "").trim(),
        calls: (known.tool_calls || []).map((c) => ({ name: c.name, arguments: c.arguments, raw: "" })),
        errors: known.errors || [],
      };
    }
    const parsed = parseAssistant(message.content);
    return { reasoning: message.reasoning_content || null, text: parsed.text, calls: parsed.calls, errors: [] };
  }

  function reasoningBlock(text) {
    const d = el("details", null, "reasoning");  // collapsed: reasoning can be long
    d.appendChild(el("summary", "reasoning (" + text.length + " characters)"));
    d.appendChild(el("pre", text));
    return d;
  }

  /* Render a trajectory ({messages, metadata.cell_changes, ...}) into `container`. */
  function render(container, traj) {
    container.replaceChildren();
    const messages = traj.messages || [];
    const changes = (traj.metadata && traj.metadata.cell_changes) || {};
    const known = (traj.metadata && traj.metadata.assistant_turns) || {};
    let turn = null;
    let number = 0;
    messages.forEach((m, i) => {
      if (m.role === "system") {
        const d = el("details", null, "system");
        d.appendChild(el("summary", "system prompt"));
        d.appendChild(el("pre", m.content));
        container.appendChild(d);
      } else if (m.role === "user" && !turn) {
        const box = el("div", null, "task");
        box.appendChild(el("h4", "Task"));
        box.appendChild(el("pre", m.content));
        container.appendChild(box);
      } else if (m.role === "assistant") {
        number += 1;
        turn = el("div", null, "turn");
        turn.dataset.turn = String(number);
        turn.appendChild(el("h4", "Turn " + number));
        const shown = assistantTurn(m, known[String(i)]);
        if (shown.reasoning) turn.appendChild(reasoningBlock(String(shown.reasoning)));
        if (shown.text) turn.appendChild(el("pre", shown.text, "model-text"));
        for (const call of shown.calls) {
          const ran = !shown.errors.length;
          turn.appendChild(el("pre", callText(call) + (ran ? "" : "  (not run)"), ran ? "call" : "call not-run"));
        }
        for (const error of shown.errors) turn.appendChild(el("p", "parse error: " + error, "parse-error"));
        container.appendChild(turn);
      } else {
        const target = turn || container;
        target.appendChild(el("pre", m.content, m.role === "tool" ? "obs" : "user-msg"));
        if (changes[String(i)]) target.appendChild(cellGrid(changes[String(i)]));
      }
    });
  }

  return { render: render, cellGrid: cellGrid, parseAssistant: parseAssistant, assistantTurn: assistantTurn, el: el };
})();

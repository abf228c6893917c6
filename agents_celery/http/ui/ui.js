// The run inspector: the runs list (ui/) and one run (ui/runs/<id>). Plain JavaScript, no build step.
// It speaks the same HTTP API as every client: fetch with the API key as a bearer header (kept in this tab's
// sessionStorage, never in a URL), or the front end's login cookie (Django's CSRF token is sent on writes).
"use strict";

const BASE = location.pathname.split("/ui/")[0];
const KEY = "agents-celery-api-key";

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.detail) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

function cookie(name) {
  const found = document.cookie.split("; ").find((c) => c.startsWith(name + "="));
  return found ? decodeURIComponent(found.slice(name.length + 1)) : null;
}

function headers(extra) {
  const out = Object.assign({}, extra);
  const key = sessionStorage.getItem(KEY);
  if (key) out["Authorization"] = "Bearer " + key;
  const csrf = cookie("csrftoken");
  if (csrf) out["X-CSRFToken"] = csrf;
  return out;
}

async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const res = await fetch(BASE + path, init);
  if (res.status === 204) return null;
  const data = await res.json().catch(() => null);
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function notice(text) {
  document.getElementById("notice").textContent = text || "";
}

function explain(err) {
  if (err.status === 401) return "This API needs a key (or a login): enter it above.";
  if (err.status === 404) return "Not found, or not yours to see.";
  return err.message || String(err);
}

function keyForm(onKey) {
  const form = document.getElementById("key-form");
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("api-key");
    if (input.value) sessionStorage.setItem(KEY, input.value);
    else sessionStorage.removeItem(KEY);
    input.value = "";
    onKey();
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const when = (ms) => (ms ? new Date(ms).toLocaleString() : "-");

// -- the runs list ----------------------------------------------------------------------------------------

function runsPage() {
  const form = document.getElementById("filters");
  const body = document.querySelector("#runs tbody");
  const more = document.getElementById("more");
  let cursor = null;

  function query(extra) {
    const params = new URLSearchParams({ limit: "50" });
    for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
    if (extra) params.set("cursor", extra);
    return params;
  }

  function row(run) {
    const waiting = run.status === "paused" ? run.pending.map((c) => c.name).join(", ") : "";
    return el("tr", { "data-run": run.run_id },
      el("td", { class: "id", "data-label": "Run" }, el("a", { href: "runs/" + encodeURIComponent(run.run_id), text: run.run_id })),
      el("td", { class: "status-" + run.status, "data-label": "Status", text: run.status }),
      el("td", { "data-label": "Agent", text: run.agent_id }),
      el("td", { "data-label": "User", text: run.user_id || "-" }),
      el("td", { "data-label": "Started", text: when(run.created_at) }),
      el("td", { "data-label": "Events", text: String(run.last_offset + 1) }),
      el("td", { "data-label": "Waiting for", text: waiting }));
  }

  async function refresh() {
    try {
      const page = await api("GET", "/runs?" + query());
      body.replaceChildren(...page.runs.map(row));
      cursor = page.next_cursor;
      more.hidden = !cursor;
      notice(page.runs.length ? "" : "No runs match.");
    } catch (err) {
      body.replaceChildren();
      more.hidden = true;
      notice(explain(err));
    }
  }

  more.addEventListener("click", async () => {
    try {
      const page = await api("GET", "/runs?" + query(cursor));
      body.append(...page.runs.map(row));
      cursor = page.next_cursor;
      more.hidden = !cursor;
    } catch (err) {
      notice(explain(err));
    }
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    refresh();
  });
  keyForm(refresh);
  refresh();
  setInterval(() => { if (more.hidden) refresh(); }, 2000); // live while the first page is all that shows
}

// -- one run ----------------------------------------------------------------------------------------------

function runPage() {
  const runId = decodeURIComponent(location.pathname.split("/ui/runs/")[1] || "");
  document.getElementById("run-id").textContent = runId;
  const timeline = document.getElementById("timeline");
  const approvals = document.getElementById("approvals");
  const stopButton = document.getElementById("stop");
  // decisions: pending call id -> { confirmed, build() }, kept until every pending call has one (the API takes a
  // decision for every pending call or none, and none would approve them all).
  const state = { lastOffset: -1, lastId: null, run: null, tools: {}, messages: {}, calls: {}, ended: false, decisions: {} };

  function setConnection(text) {
    document.getElementById("connection").textContent = text;
  }

  function show(run) {
    state.run = run;
    const status = document.getElementById("status");
    status.textContent = run.status;
    status.className = "status-" + run.status;
    document.getElementById("agent").textContent = run.agent_id;
    stopButton.hidden = ["completed", "failed", "cancelled"].includes(run.status);
    renderApprovals(run);
  }

  async function refresh() {
    try {
      const run = await api("GET", "/runs/" + encodeURIComponent(runId));
      if (!state.tools[run.agent_id]) {
        const agent = await api("GET", "/agents/" + encodeURIComponent(run.agent_id)).catch(() => ({ tools: [] }));
        state.tools[run.agent_id] = Object.fromEntries((agent.tools || []).map((t) => [t.name, t]));
      }
      show(run);
      notice("");
      return run;
    } catch (err) {
      notice(explain(err));
      return null;
    }
  }

  // A form per pending call, built from the tool's JSON schema: one field per property. Each call is decided on
  // its own; the decisions are sent together once every pending call has one.
  function renderApprovals(run) {
    const pending = run.status === "paused" ? run.pending : [];
    approvals.hidden = pending.length === 0;
    if (approvals.dataset.shown === pending.map((c) => c.id).join(",")) return;
    approvals.dataset.shown = pending.map((c) => c.id).join(",");
    state.decisions = {};
    const summary = el("p", { class: "awaiting", role: "status", "aria-live": "polite" });
    approvals.replaceChildren(summary, ...pending.map((call) => approvalForm(run, call)));
    showAwaiting();
  }

  function undecided() {
    return (state.run && state.run.status === "paused" ? state.run.pending : []).filter((c) => !state.decisions[c.id]);
  }

  function showAwaiting() {
    const summary = approvals.querySelector(".awaiting");
    if (!summary) return;
    const left = undecided();
    const total = state.run.pending.length;
    summary.textContent = left.length
      ? `Still to decide: ${left.length} of ${total} (${left.map((c) => c.name).join(", ")}).` +
        (left.length < total ? " Your decisions are sent once every call has one." : "")
      : "Sending your decisions…";
  }

  async function sendDecisions(run) {
    if (undecided().length) return;
    const buttons = approvals.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const tools = state.run.pending.map((c) => state.decisions[c.id].build());
      await api("POST", `/agents/${encodeURIComponent(run.agent_id)}/runs/${encodeURIComponent(runId)}/continue`,
        { tools, stream: false, background: true });
      approvals.dataset.shown = "";
      await refresh();
    } catch (err) {
      notice(explain(err));
      buttons.forEach((b) => { b.disabled = false; });
      const summary = approvals.querySelector(".awaiting");
      if (summary) summary.textContent = "Not sent: change a decision or try again.";
    }
  }

  function approvalForm(run, call) {
    const tool = (state.tools[run.agent_id] || {})[call.name] || {};
    const schema = tool.parameters || { properties: {} };
    let args = {};
    try { args = JSON.parse(call.arguments || "{}"); } catch (e) { args = {}; }
    const form = el("form", { class: "approval", "data-call": call.id, "aria-label": "Decide on " + call.name },
      el("h2", { text: `${call.name} wants to run` }),
      tool.description ? el("p", { text: tool.description }) : null);
    const fields = [];
    for (const [name, prop] of Object.entries(schema.properties || {})) {
      const id = `arg-${call.id}-${name}`;
      const type = prop.type;
      const value = args[name];
      let input;
      if (type === "boolean") input = el("input", { id, type: "checkbox", checked: Boolean(value) });
      else if (type === "integer" || type === "number") input = el("input", { id, type: "number", step: type === "integer" ? "1" : "any", value: value ?? "" });
      else if (type === "string") input = el("input", { id, type: "text", value: value ?? "" });
      else input = el("textarea", { id, rows: "3", text: JSON.stringify(value ?? null, null, 2) });
      input.name = name;
      fields.push({ name, type, input });
      form.append(el("label", { for: id, text: name + (prop.description ? ` (${prop.description})` : "") }), input);
    }
    const noteId = `note-${call.id}`;
    const note = el("textarea", { id: noteId, rows: "2", placeholder: "why (sent to the model)" });
    form.append(el("label", { for: noteId, text: "Note" }), note);
    const approve = el("button", { type: "button", text: "Approve", "aria-pressed": "false" });
    const reject = el("button", { type: "button", text: "Reject", "aria-pressed": "false" });
    const verdict = el("p", { class: "decision", text: "Awaiting your decision." });
    form.append(el("div", { class: "actions" }, approve, reject), verdict);

    function edited() {
      const out = Object.assign({}, args);
      for (const { name, type, input } of fields) {
        if (type === "boolean") out[name] = input.checked;
        else if (type === "integer" || type === "number") out[name] = input.value === "" ? null : Number(input.value);
        else if (type === "string") out[name] = input.value;
        else out[name] = JSON.parse(input.value);
      }
      return out;
    }

    // This call's decision only; the fields are read when the decisions are sent (edits until then count).
    function decide(confirmed) {
      state.decisions[call.id] = {
        confirmed,
        build() {
          const decision = { tool_call_id: call.id, confirmed, confirmation_note: note.value || null };
          if (confirmed) decision.tool_args = edited();
          return decision;
        },
      };
      form.dataset.decision = confirmed ? "approved" : "rejected";
      approve.setAttribute("aria-pressed", String(confirmed));
      reject.setAttribute("aria-pressed", String(!confirmed));
      verdict.textContent = confirmed ? "Approved." : "Rejected.";
      showAwaiting();
      sendDecisions(run);
    }
    approve.addEventListener("click", () => decide(true));
    reject.addEventListener("click", () => decide(false));
    return form;
  }

  function add(item) {
    timeline.append(item);
    return item;
  }

  // The run's input: its user messages, images as thumbnails and files by name (their bytes fetched with the key).
  async function showInput() {
    let data;
    try {
      data = await api("GET", "/runs/" + encodeURIComponent(runId) + "/input");
    } catch (err) {
      return; // the timeline says what is wrong
    }
    const section = document.getElementById("input");
    const items = (data.messages || []).map((m) => {
      const item = el("li", { class: "message user" });
      const parts = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content || [];
      for (const part of parts) item.append(showPart(part));
      return item;
    });
    section.replaceChildren(el("h2", { text: "Input" }), el("ol", { class: "input" }, ...items));
    section.hidden = items.length === 0;
  }

  function showPart(part) {
    if (part.type === "text") return el("p", { text: part.text });
    if (part.ref) return attachment(part);
    if (part.type === "image_url" && part.image_url) { // by URL: a link (the page loads nothing from elsewhere)
      return el("a", { class: "image-link", href: part.image_url.url, rel: "noreferrer noopener", target: "_blank", text: "image " + part.image_url.url });
    }
    const file = part.file || {};
    return el("span", { class: "file", text: "file " + (file.filename || file.file_id || "") });
  }

  function attachment(part) {
    const image = part.type === "image_url";
    const name = part.filename || (image ? "image" : "file");
    const size = part.bytes >= 1048576 ? (part.bytes / 1048576).toFixed(1) + " MB" : Math.ceil(part.bytes / 1024) + " KB";
    const about = ` (${part.media_type}, ${size})`;
    const caption = el("figcaption", {}, el("span", { class: "name", text: name }), about);
    const box = el("figure", { class: image ? "attachment image" : "attachment", "data-ref": part.ref }, caption);
    fetch(part.url, { headers: headers({}), credentials: "same-origin" })
      .then((res) => (res.ok ? res.blob() : Promise.reject(new Error(`HTTP ${res.status}`))))
      .then((blob) => {
        const url = URL.createObjectURL(blob);
        if (image) box.prepend(el("img", { class: "thumb", src: url, alt: name }));
        caption.replaceChildren(el("a", { class: "name", href: url, download: name, text: name }), about);
      })
      .catch(() => {}); // the name and size stay shown
    return box;
  }

  // A workflow run's steps as a tree: containers (parallel, condition, loop, router) hold their steps; each node
  // is shown once, by its path (a loop's iterations are nodes of their own: grow@1, grow@2), with its state, its
  // output and, for an agent step, a link to the step's own run.
  const tree = { nodes: {}, section: document.getElementById("workflow"), root: document.getElementById("steps") };
  function treeNode(path, name, kind, parent) {
    if (tree.nodes[path]) return tree.nodes[path];
    tree.section.hidden = false;
    const label = el("span", { class: "label", text: `${kind} ${name}` });
    const item = el("li", { "data-path": path, "data-state": "running" }, label, el("span", { class: "output" }), el("ol"));
    const holder = parent && tree.nodes[parent] ? tree.nodes[parent].querySelector(":scope > ol") : tree.root;
    holder.append(item);
    tree.nodes[path] = item;
    return item;
  }
  function renderStep(ev) {
    const meta = ev.metadata || {};
    const path = meta.workflow_step;
    if (ev.type === "STEP_STARTED") {
      const item = treeNode(path, ev.step_name, meta.executor === "agent" ? "agent step" : "step", meta.parent);
      item.dataset.state = "running";
    } else if (tree.nodes[path]) {
      const item = tree.nodes[path];
      item.dataset.state = meta.suspended ? "paused" : meta.failed || meta.ended || meta.stopped ? "failed" : meta.abandoned ? "running" : "done";
    }
  }
  function renderNode(value) {
    const item = treeNode(value.node, value.name, value.type.toLowerCase(), value.parent);
    if (value.phase === "completed") item.dataset.state = "done";
    if (value.phase === "iteration_started") item.querySelector(":scope > .output").textContent = `iteration ${value.iteration}`;
    if (value.condition_result !== undefined) item.querySelector(":scope > .output").textContent = `when: ${value.condition_result}`;
    if (value.selected_steps) item.querySelector(":scope > .output").textContent = `chose ${value.selected_steps.join(", ")}`;
  }
  function renderOutput(value) {
    const item = tree.nodes[value.step];
    if (!item) return;
    const text = typeof value.output === "string" ? value.output : JSON.stringify(value.output);
    item.querySelector(":scope > .output").textContent = "→ " + (text.length > 120 ? text.slice(0, 117) + "..." : text);
  }
  function renderChild(ev) {
    const path = String(ev.parent_tool_call_id || "").replace(/^step:/, "");
    const item = tree.nodes[path];
    if (!item || item.querySelector(":scope > a")) return;
    item.querySelector(":scope > .label").after(" ", el("a", { href: encodeURIComponent(ev.subagent_run_id), text: "its run" }));
  }

  // One stored event, rendered once (events at or below the last rendered offset are skipped).
  function render(offset, ev) {
    const type = ev.type;
    const meta = ev.metadata || {};
    if ((type === "STEP_STARTED" || type === "STEP_FINISHED") && meta.workflow_step) renderStep(ev);
    else if (type === "CUSTOM" && ev.name === "workflow_node") renderNode(ev.value);
    else if (type === "CUSTOM" && ev.name === "step_output") renderOutput(ev.value);
    else if (type === "SUBAGENT_STARTED" && String(ev.parent_tool_call_id || "").startsWith("step:")) renderChild(ev);
    if (type === "TEXT_MESSAGE_START") {
      const kind = ev.role === "user" ? "message user" : "message";
      state.messages[ev.message_id] = add(el("li", { class: kind, "data-message": ev.message_id }));
    } else if (type === "TEXT_MESSAGE_CONTENT") {
      const item = state.messages[ev.message_id] || (state.messages[ev.message_id] = add(el("li", { class: "message", "data-message": ev.message_id })));
      item.append(ev.delta);
    } else if (type === "TOOL_CALL_START") {
      const item = add(el("li", { class: "tool", "data-call": ev.tool_call_id, "data-name": ev.tool_call_name },
        el("strong", { text: "tool " + ev.tool_call_name }), el("pre", { class: "args" }), el("pre", { class: "result" })));
      state.calls[ev.tool_call_id] = item;
    } else if (type === "TOOL_CALL_ARGS") {
      const item = state.calls[ev.tool_call_id];
      if (item) item.querySelector(".args").append(ev.delta);
    } else if (type === "TOOL_CALL_RESULT") {
      // A result that comes after a pause (a decided call) is shown where it happened, below the pause.
      let item = state.calls[ev.tool_call_id];
      if (!item || item.dataset.paused) {
        const name = item ? item.dataset.name : "";
        item = add(el("li", { class: "tool decided", "data-call": ev.tool_call_id },
          name ? el("strong", { text: "tool " + name }) : null, el("pre", { class: "result" })));
        state.calls[ev.tool_call_id] = item;
      }
      item.querySelector(".result").textContent = "→ " + ev.content;
    } else if (type === "STEP_STARTED" && meta.attempt > 1) {
      add(el("li", { class: "retry", text: `retried: ${ev.step_name} step, attempt ${ev.metadata.attempt}` }));
    } else if (type === "CUSTOM" && ev.name === "attempt_abandoned") {
      add(el("li", { class: "retry", text: "an attempt of this step was abandoned (its worker stopped)" }));
    } else if (type === "RUN_FINISHED") {
      const outcome = (ev.outcome && ev.outcome.type) || "success";
      if (outcome === "interrupt") Object.values(state.calls).forEach((item) => { item.dataset.paused = "1"; });
      add(el("li", { class: "end", text: outcome === "interrupt" ? "paused: waiting for a decision" : "run finished: " + outcome }));
    } else if (type === "RUN_ERROR") {
      add(el("li", { class: "end", text: "run failed: " + (ev.message || "") }));
    }
    state.lastOffset = offset;
    timeline.dataset.lastOffset = String(offset);
    document.getElementById("offset").textContent = `${offset + 1} events`;
    if (type === "RUN_FINISHED" || type === "RUN_ERROR" || type === "RUN_STARTED") refresh();
  }

  // SSE over fetch (an EventSource cannot send the key): replay then live, resumed from the last offset.
  async function follow() {
    let failures = 0;
    while (!state.ended) {
      try {
        const extra = { Accept: "text/event-stream" };
        if (state.lastId !== null) extra["Last-Event-ID"] = state.lastId;
        const res = await fetch(`${BASE}/runs/${encodeURIComponent(runId)}/events?until=end`, { headers: headers(extra), credentials: "same-origin" });
        if (res.status === 204) { state.ended = true; break; }
        if (!res.ok) {
          const body = await res.json().catch(() => null);
          const err = new ApiError(res.status, body);
          notice(explain(err));
          if ([400, 401, 403, 404, 409, 410].includes(res.status)) { setConnection("stopped"); await waitForKey(); continue; }
          throw err;
        }
        setConnection("live");
        failures = 0;
        await read(res.body.getReader());
        const run = await refresh();
        if (run && ["completed", "failed", "cancelled"].includes(run.status)) state.ended = true;
      } catch (err) {
        failures += 1;
        setConnection("reconnecting");
        await sleep(Math.min(5000, 200 * 2 ** Math.min(failures, 5)) * (0.5 + Math.random() / 2));
      }
    }
    setConnection("ended");
    refresh();
  }

  let keyGiven = null;
  function waitForKey() {
    return new Promise((resolve) => { keyGiven = resolve; });
  }

  async function read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let id = null, data = null;
        for (const line of block.split("\n")) {
          if (line.startsWith("id: ")) id = line.slice(4);
          else if (line.startsWith("data: ")) data = line.slice(6);
        }
        if (id === null || data === null) continue; // keep-alive comments, the error frame
        const offset = parseInt(id.split(".")[0], 10);
        if (offset <= state.lastOffset) continue; // seen: never shown twice
        if (offset !== state.lastOffset + 1) throw new Error(`offset ${offset} after ${state.lastOffset}: reconnect`);
        state.lastId = id;
        render(offset, JSON.parse(data));
      }
    }
  }

  stopButton.addEventListener("click", async () => {
    stopButton.disabled = true;
    try {
      await api("POST", `/agents/${encodeURIComponent(state.run.agent_id)}/runs/${encodeURIComponent(runId)}/cancel`);
      await refresh();
    } catch (err) {
      notice(explain(err));
    } finally {
      stopButton.disabled = false;
    }
  });
  keyForm(async () => {
    await refresh();
    showInput();
    if (keyGiven) { const go = keyGiven; keyGiven = null; go(); }
  });
  refresh();
  showInput();
  follow();
}

if (document.body.dataset.page === "runs") runsPage();
else runPage();

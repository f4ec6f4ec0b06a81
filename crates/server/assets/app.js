// folio's chat page: folio's own API (/v1/models, /v1/chat/completions with stream: true),
// nothing else. Model text is only ever put into the page as text nodes (see `markdown`),
// and the Content-Security-Policy forbids inline scripts besides.
"use strict";

const $ = (id) => document.getElementById(id);
const SETTINGS = "folio.settings";
const KEY = "folio.apiKey";
const FIELDS = ["system", "temperature", "top_p", "max_tokens"];

/** The conversation sent with each request (the system prompt is added at send time). */
let history = [];
/** The AbortController of the stream in flight, or null. */
let inFlight = null;

// ---- settings: kept in localStorage, read from the inputs when a request is made ----

function loadSettings() {
  let s = {};
  try { s = JSON.parse(localStorage.getItem(SETTINGS) || "{}"); } catch (_) { s = {}; }
  for (const f of FIELDS) if (s[f] !== undefined) $(f).value = s[f];
  $("api-key").value = localStorage.getItem(KEY) || "";
  return s;
}

function saveSettings() {
  const s = { model: $("model").value };
  for (const f of FIELDS) s[f] = $(f).value;
  localStorage.setItem(SETTINGS, JSON.stringify(s));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function notice(text) {
  $("notice").textContent = text || "";
  $("notice").hidden = !text;
}

/** A 401: open the settings at the key field and say why. */
function askForKey() {
  $("settings").hidden = false;
  notice($("api-key").value
    ? "The server refused this API key: enter the one it was started with (--api-key), then press Use key."
    : "This server needs an API key (--api-key): enter it under Settings, then press Use key.");
  $("api-key").focus();
}

// ---- models ----

async function loadModels(preferred) {
  let r;
  try {
    r = await fetch("v1/models", { headers: headers() });
  } catch (e) {
    notice("Cannot reach the server: " + e.message);
    return;
  }
  if (r.status === 401) return askForKey();
  if (!r.ok) return notice("GET /v1/models: " + (await errorText(r)));
  notice("");
  const sel = $("model");
  const keep = preferred || sel.value;
  sel.replaceChildren();
  for (const m of (await r.json()).data || []) {
    const o = document.createElement("option");
    o.value = o.textContent = m.id;
    sel.append(o);
  }
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}

async function errorText(r) {
  const body = await r.text();
  try { return JSON.parse(body).error.message || body; } catch (_) { return r.status + " " + body; }
}

// ---- rendering: a small markdown subset, built as DOM nodes, text as text nodes ----

/** `code` and **bold** within one line. */
function inline(parent, line) {
  for (const part of line.split(/(`[^`\n]+`|\*\*[^*\n]+\*\*)/)) {
    if (!part) continue;
    if (part.length > 2 && part.startsWith("`") && part.endsWith("`")) {
      const c = document.createElement("code");
      c.textContent = part.slice(1, -1);
      parent.append(c);
    } else if (part.length > 4 && part.startsWith("**") && part.endsWith("**")) {
      const b = document.createElement("strong");
      b.textContent = part.slice(2, -2);
      parent.append(b);
    } else {
      parent.append(document.createTextNode(part));
    }
  }
}

/** Fenced code blocks (an open fence while streaming is still code), headings, lists,
 * paragraphs with line breaks. */
function markdown(el, text) {
  const out = [];
  let code = null, codeLines = [], para = null, list = null;
  const endBlocks = () => { para = null; list = null; };
  for (const line of text.split("\n")) {
    if (code) {
      if (/^\s*```\s*$/.test(line)) code = null;
      else codeLines.push(line), code.textContent = codeLines.join("\n");
      continue;
    }
    const fence = line.match(/^\s*```\s*([\w+.#-]*)\s*$/);
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (fence) {
      endBlocks();
      const pre = document.createElement("pre");
      code = document.createElement("code");
      codeLines = [];
      if (fence[1]) code.className = "language-" + fence[1];
      pre.append(code);
      out.push(pre);
    } else if (!line.trim()) {
      endBlocks();
    } else if (heading) {
      endBlocks();
      const h = document.createElement("h" + Math.min(6, heading[1].length + 2));
      inline(h, heading[2]);
      out.push(h);
    } else if (item) {
      para = null;
      const tag = /\d/.test(item[1]) ? "ol" : "ul";
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = document.createElement(tag);
        out.push(list);
      }
      const li = document.createElement("li");
      inline(li, item[2]);
      list.append(li);
    } else {
      list = null;
      if (para) para.append(document.createElement("br"));
      else out.push(para = document.createElement("p"));
      inline(para, line);
    }
  }
  el.replaceChildren(...out);
}

function addMessage(role) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  $("log").append(div);
  return div;
}

function scrollToEnd() {
  const log = $("log");
  log.scrollTop = log.scrollHeight;
}

/** One assistant answer on the page: folded reasoning, content, a meta line. */
class Answer {
  constructor() {
    this.el = addMessage("assistant");
    this.content = "";
    this.reasoning = "";
    this.body = document.createElement("div");
    this.body.className = "content";
    this.meta = document.createElement("div");
    this.meta.className = "meta";
    this.el.append(this.body, this.meta);
    this.meta.textContent = "…";
  }

  addReasoning(text) {
    if (!this.details) {
      this.details = document.createElement("details");
      this.details.className = "reasoning";
      const s = document.createElement("summary");
      s.textContent = "Reasoning";
      this.thought = document.createElement("div");
      this.details.append(s, this.thought);
      this.el.insertBefore(this.details, this.body);
    }
    this.reasoning += text;
    this.thought.textContent = this.reasoning;
  }

  addContent(text) {
    this.content += text;
    markdown(this.body, this.content);
  }

  error(text) {
    const e = document.createElement("div");
    e.className = "error";
    e.textContent = text;
    this.el.insertBefore(e, this.meta);
  }
}

// ---- streaming ----

/** The JSON payloads of an SSE response body, until `data: [DONE]`. */
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let m;
    while ((m = buf.match(/\r?\n\r?\n/))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = block.split(/\r?\n/)
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).replace(/^ /, ""))
        .join("\n");
      if (!data) continue; // a keep-alive comment
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history);
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if ($("model").value) body.model = $("model").value;
  for (const [f, parse] of [["temperature", parseFloat], ["top_p", parseFloat], ["max_tokens", (v) => parseInt(v, 10)]]) {
    const v = parse($(f).value);
    if (Number.isFinite(v)) body[f] = v;
  }
  return body;
}

function setBusy(busy) {
  const b = $("send");
  b.textContent = busy ? "Stop" : "Send";
  b.classList.toggle("busy", busy);
}

async function send(text) {
  history.push({ role: "user", content: text });
  const userEl = addMessage("user");
  userEl.textContent = text;
  const answer = new Answer();
  scrollToEnd();
  const controller = new AbortController();
  inFlight = controller;
  setBusy(true);
  const started = performance.now();
  let finish = null, usage = null, firstToken = null;
  try {
    const r = await fetch("v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
    });
    if (r.status === 401) {
      // Put the question back, to be sent again once the key is entered.
      history.pop();
      userEl.remove();
      answer.el.remove();
      $("prompt").value = text;
      askForKey();
      return;
    }
    if (!r.ok) {
      answer.error(await errorText(r));
      finish = "error";
      return;
    }
    for await (const chunk of events(r)) {
      if (chunk.error) { answer.error(chunk.error.message || JSON.stringify(chunk.error)); finish = "error"; break; }
      if (chunk.usage) usage = chunk.usage;
      const choice = (chunk.choices || [])[0];
      if (!choice) continue;
      const d = choice.delta || {};
      if (d.reasoning_content) answer.addReasoning(d.reasoning_content);
      if (d.content) {
        if (firstToken === null) firstToken = performance.now();
        answer.addContent(d.content);
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      scrollToEnd();
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else { answer.error("The stream broke: " + e.message); finish = "error"; }
  } finally {
    if (inFlight === controller) inFlight = null;
    setBusy(false);
    if (answer.el.isConnected) {
      if (answer.content) history.push({ role: "assistant", content: answer.content });
      answer.meta.textContent = describe(finish, usage, started, firstToken);
      answer.el.dataset.finish = finish || "";
    }
  }
}

function describe(finish, usage, started, firstToken) {
  const parts = [];
  if (finish === "stopped") parts.push("stopped");
  else if (finish === "length") parts.push("cut at max_tokens");
  else if (finish && finish !== "stop" && finish !== "error") parts.push(finish);
  if (usage) {
    parts.push(usage.completion_tokens + " tokens");
    const secs = (performance.now() - (firstToken || started)) / 1000;
    if (usage.completion_tokens > 1 && secs > 0) parts.push((usage.completion_tokens / secs).toFixed(1) + " tok/s");
  }
  return parts.join(" · ");
}

// ---- wiring ----

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  if (inFlight) return inFlight.abort();
  const text = $("prompt").value.trim();
  if (!text) return;
  $("prompt").value = "";
  send(text);
});
$("prompt").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("settings-toggle").addEventListener("click", () => { $("settings").hidden = !$("settings").hidden; });
$("new-chat").addEventListener("click", () => {
  if (inFlight) inFlight.abort();
  history = [];
  $("log").replaceChildren();
});
for (const f of FIELDS) $(f).addEventListener("change", saveSettings);
$("model").addEventListener("change", saveSettings);
const useKey = () => {
  localStorage.setItem(KEY, $("api-key").value.trim());
  loadModels();
};
$("use-key").addEventListener("click", useKey);
$("api-key").addEventListener("keydown", (e) => { if (e.key === "Enter") useKey(); });

loadModels(loadSettings().model);
$("prompt").focus();

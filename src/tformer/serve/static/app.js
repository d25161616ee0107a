// The page of `tformer serve`. Every string reaches the page through textContent or the canvas's fillText,
// never as HTML, so neither what is typed nor what the model writes can become markup.
"use strict";

const $ = (id) => document.getElementById(id);
const ACTIONS = {  // what the button does for each kind of checkpoint
  "seq2seq": { endpoint: "translate", button: "Translate", label: "Sentence to translate", title: "Translation" },
  "gpt": { endpoint: "generate", button: "Generate", label: "Prompt", title: "Continuation" },
  "bert classifier": { endpoint: "classify", button: "Classify", label: "Text to classify", title: "Labels" },
  "bert": { endpoint: null, button: "Show attention", label: "Text", title: "" },
};
let info = null;
let maps = [];

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function status(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

// A server started with --api-key wants it on every request but the page's: typed in once, it is kept for
// this tab only (sessionStorage) and sent as "Authorization: Bearer KEY".
let apiKey = sessionStorage.getItem("tformer-api-key") || "";

function headers(more = {}) {
  return apiKey ? { ...more, Authorization: `Bearer ${apiKey}` } : more;
}

async function post(path, body) {
  const response = await fetch(path, { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                       body: JSON.stringify(body) });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

async function start() {
  try {
    const response = await fetch("/info", { headers: headers() });
    info = await response.json();
    if (response.status === 401) {  // ask for the key; its form calls start() again
      $("key-form").hidden = false;
      status(apiKey ? "the server refused this key; type it again" : "this server needs its API key", true);
      return;
    }
    if (!response.ok) throw new Error(info.error || response.statusText);
  } catch (e) {
    status("cannot reach the server: " + e.message, true);
    return;
  }
  $("key-form").hidden = true;
  status("");
  const action = ACTIONS[info.kind];
  const s = info.sizes;
  $("model").textContent = `${info.kind} (${info.model}): d_model ${s.d_model}, ${s.n_layers} layers, ` +
    `${s.n_heads} heads, ${s.parameters.toLocaleString("en")} parameters, context ${s.max_len}; ` +
    `endpoints: ${info.endpoints.map((e) => "/" + e).join(", ")}`;
  $("text-label").textContent = action.label;
  $("answer-title").textContent = action.title;
  $("go").textContent = action.button;
  $("options").hidden = info.kind !== "gpt";
  $("max-new").max = info.limits.max_new_tokens;
  $("max-new").value = Math.min(Number($("max-new").value), info.limits.max_new_tokens);
  $("go").disabled = false;
  $("go").addEventListener("click", run);
  for (const id of ["part", "layer", "head"]) $(id).addEventListener("change", () => (id === "part" ? pickPart() : draw()));
}

async function run() {
  const text = $("text").value;
  const action = ACTIONS[info.kind];
  $("go").disabled = true;
  status("working\u2026");
  try {
    let target = null;  // a translator's map aligns the translation shown, not its greedy one
    if (action.endpoint) {
      $("answer").hidden = false;
      $("output").replaceChildren();
      if (info.kind === "gpt") await generate(text);
      else if (info.kind === "seq2seq") target = $("output").textContent = (await post("/translate", { text })).translation;
      else showLabels((await post("/classify", { text, top: 5 })).classification);
    }
    if (info.endpoints.includes("attention")) await attention(text, target);
    status("");
  } catch (e) {
    status(e.message, true);
  } finally {
    $("go").disabled = false;
  }
}

async function generate(prompt) {
  const body = { prompt, stream: true, max_new_tokens: Number($("max-new").value),
                 temperature: Number($("temperature").value) };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  const response = await fetch("/generate", { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                              body: JSON.stringify(body) });
  if (!response.ok) throw new Error((await response.json()).error);
  const out = $("output");
  out.append(el("span", prompt, "prompt"));
  const written = el("span");
  out.append(written);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {  // one server-sent event: "event: NAME\ndata: JSON"
      const lines = buffer.slice(0, end).split("\n");
      buffer = buffer.slice(end + 2);
      const name = lines.find((l) => l.startsWith("event: ")).slice(7);
      const data = JSON.parse(lines.find((l) => l.startsWith("data: ")).slice(6));
      if (name === "token") written.textContent += data.text;
      else if (name === "done") written.textContent = data.text;
      else if (name === "error") throw new Error(data.error);
    }
  }
}

function showLabels(labels) {
  for (const { label, probability } of labels) {
    const row = el("div", undefined, "label-row");
    const bar = el("div", undefined, "bar");
    bar.style.width = `${Math.round(probability * 300)}px`;
    row.append(el("span", label, "name"), bar, el("span", probability.toFixed(3)));
    $("output").append(row);
  }
}

async function attention(text, target) {
  maps = (await post("/attention", target && target.trim() ? { text, target } : { text })).maps;
  $("attention-section").hidden = false;
  const part = $("part");
  part.replaceChildren(...maps.map((m, i) => { const o = el("option", m.title); o.value = i; return o; }));
  part.value = String(Math.max(0, maps.findIndex((m) => m.part === "cross")));
  pickPart();
}

function pickPart() {
  const m = maps[Number($("part").value)];
  const layers = m.weights.length, heads = m.weights[0].length;
  const option = (text, value) => { const o = el("option", text); o.value = value; return o; };
  $("layer").replaceChildren(...Array.from({ length: layers }, (_, i) => option(String(i), i)));
  $("layer").value = String(layers - 1);
  $("head").replaceChildren(option("mean of all", "mean"), ...Array.from({ length: heads }, (_, i) => option(String(i), i)));
  draw();
}

function matrix(m, layer, head) {  // (Tq, Tk): one head's weights, or the mean over the heads
  const heads = m.weights[layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, q) => row.map((_, k) => heads.reduce((sum, h) => sum + h[q][k], 0) / heads.length));
}

function shade(x) {  // 0 -> pale, 1 -> dark blue
  const t = Math.min(1, Math.max(0, x));
  const from = [247, 251, 255], to = [8, 48, 107];
  return `rgb(${from.map((f, i) => Math.round(f + (to[i] - f) * t)).join(",")})`;
}

function draw() {
  const m = maps[Number($("part").value)];
  const w = matrix(m, Number($("layer").value), $("head").value);
  const canvas = $("attention"), ctx = canvas.getContext("2d");
  const font = "13px system-ui, sans-serif";
  ctx.font = font;
  const short = (s) => (s.length > 14 ? s.slice(0, 13) + "\u2026" : s);
  const left = 12 + Math.max(...m.queries.map((q) => ctx.measureText(short(q)).width));
  const top = 12 + Math.max(...m.keys.map((k) => ctx.measureText(short(k)).width));
  const cell = Math.max(6, Math.min(36, Math.floor((720 - left - 10) / m.keys.length)));
  canvas.width = left + cell * m.keys.length + 10;
  canvas.height = top + cell * m.queries.length + 10;
  ctx.font = font;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  w.forEach((row, q) => row.forEach((x, k) => {
    ctx.fillStyle = shade(x);
    ctx.fillRect(left + k * cell, top + q * cell, cell, cell);
  }));
  ctx.fillStyle = "#222";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  m.queries.forEach((q, i) => ctx.fillText(short(q), left - 6, top + (i + 0.5) * cell));
  ctx.save();
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = "left";
  m.keys.forEach((k, i) => ctx.fillText(short(k), -top + 6, left + (i + 0.5) * cell));
  ctx.restore();
  canvas.dataset.state = "drawn";
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  apiKey = $("key").value.trim();
  sessionStorage.setItem("tformer-api-key", apiKey);
  start();
});
start();

// The page of `tformer serve`. Every string reaches the page through textContent (or a property such as
// title), never as HTML, so neither what is typed nor what the model writes can become markup.
"use strict";

const $ = (id) => document.getElementById(id);
const SELF_MAP = "a cell's shade is the weight the row's token gives the column's (every row sums to 1).";
// What the page says and does for each kind of checkpoint (/info's `kind`): the endpoint the button calls,
// its words, the help above the text box and above the attention map.
const KINDS = {
  "seq2seq": {
    endpoint: "translate", button: "Translate", label: "Sentence to translate", title: "Translation",
    help: "Type a sentence and press Translate: the model's translation appears below, then the attention " +
          "map of the sentence and that translation.",
    map: "Each row is a query token, each column a key token; " + SELF_MAP + " The cross-attention's rows " +
         "are the translation (each labelled by the token it predicts) and its columns the sentence: the " +
         "model's alignment. The encoder's map is the sentence over itself, the decoder's the translation " +
         "over its earlier tokens.",
  },
  "gpt": {
    endpoint: "generate", button: "Generate", label: "Prompt", title: "Continuation",
    help: "Type a prompt and press Generate: the model's continuation streams in below (at most the new " +
          "tokens asked for; a seed makes a draw repeatable), then the attention map of the prompt and its " +
          "continuation.",
    map: "Each row is a token of the prompt or of the continuation, each column a token it attends to; " +
         SELF_MAP + " The attention is causal: a token sees itself and the tokens before it, so the " +
         "triangle above the diagonal stays empty.",
  },
  "bert classifier": {
    endpoint: "classify", button: "Classify", label: "Text to classify", title: "Labels",
    help: "Type a text and press Classify: the model's most likely labels appear below with their " +
          "probabilities, then the attention map of the text.",
    map: "Each row is a token of the text (with the markers the model adds around it), each column a token " +
         "it attends to, before or after it; " + SELF_MAP + " The labels are read from the first token's " +
         "row.",
  },
  "bert": {
    endpoint: null, button: "Show attention", label: "Text", title: "",
    help: "This checkpoint has no task head: type a text and press Show attention to see how its tokens " +
          "attend to each other.",
    map: "Each row is a token of the text (with the markers the model adds around it), each column a token " +
         "it attends to, before or after it; " + SELF_MAP,
  },
};
const OTHER = { endpoint: null, button: "Show attention", label: "Text", title: "",
                help: "Type a text and press Show attention.", map: "Each row is a query token, each column a " +
                "key token; " + SELF_MAP };
const LABEL = 14;  // px: a label's thickness (its line-height in style.css): closer labels are thinned
const CELL = { min: 12, max: 32 };  // px: the bounds of a new map's cell size (the zoom goes from 4 to 40)
let info = null;
let kind = OTHER;
let maps = [];
let view = null;  // what the canvas shows: { m, w, cell, q, k } (q, k: the cell pointed at, or null)
const FADED = 0.15;  // the opacity of the other rows while one row is picked out

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

class Refusal extends Error {  // a request that failed: `code` is the HTTP status, 0 if none came back
  constructor(message, code) { super(message); this.code = code; }
}

async function send(path, body) {  // the response to a POST of `body` as JSON, or a Refusal saying why not
  let response;
  try {
    response = await fetch(path, { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                   body: JSON.stringify(body) });
  } catch (e) {
    throw new Refusal(`cannot reach the server (${e.message})`, 0);
  }
  if (response.ok) return response;
  let error = "";
  try { error = (await response.json()).error || ""; } catch { /* not JSON: a proxy's page */ }
  throw new Refusal(`${path}: ${error || `${response.status} ${response.statusText}`}`, response.status);
}

async function post(path, body) {
  const response = await send(path, body);
  try {
    return await response.json();
  } catch (e) {
    throw new Refusal(`${path}: the answer is not JSON (${e.message})`, response.status);
  }
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
  kind = { ...(KINDS[info.kind] || KINDS[info.family] || OTHER) };
  if (kind.endpoint && !info.endpoints.includes(kind.endpoint)) kind = { ...OTHER, endpoint: null };
  const s = info.sizes;
  $("model").textContent = `${info.kind} (${info.model}): d_model ${s.d_model}, ${s.n_layers} layers, ` +
    (s.n_heads ? `${s.n_heads} heads, ` : "") + `${s.parameters.toLocaleString("en")} parameters, context ${s.max_len}; ` +
    `endpoints: ${info.endpoints.map((e) => "/" + e).join(", ")}`;
  const drawn = info.endpoints.includes("attention");
  $("help").textContent = kind.help + (drawn ? "" : " This model's attention is not exact (a fused kernel), " +
                                                    "so the page draws no attention map.");
  $("map-help").textContent = kind.map;
  $("text-label").textContent = kind.label;
  $("answer-title").textContent = kind.title;
  $("go").textContent = kind.button;
  $("options").hidden = kind.endpoint !== "generate";
  $("max-new").max = info.limits.max_new_tokens;
  $("max-new").value = Math.min(Number($("max-new").value), info.limits.max_new_tokens);
  if (!kind.endpoint && !drawn) return status("this checkpoint serves nothing this page can show", true);
  $("go").disabled = false;
}

function clearResults() {  // before each request: nothing of the last one stays on the page
  $("output").replaceChildren();
  $("answer").hidden = true;
  $("warnings").replaceChildren();
  $("warnings").hidden = true;
  clearMap();
}

function clearMap() {
  maps = [];
  view = null;
  hideTip();
  $("attention-section").hidden = true;
  for (const id of ["part", "layer", "head", "row", "key-labels", "query-labels"]) $(id).replaceChildren();
  $("map-covers").textContent = "";
  $("row-readout").textContent = "";
  $("row-readout").hidden = true;
  const canvas = $("attention");
  canvas.width = canvas.height = 0;
  canvas.dataset.state = "empty";
}

function warn(answer) {  // an answer's `warnings` (one line each, once), under the button; they block nothing
  if (!answer || !Array.isArray(answer.warnings)) return;
  const shown = new Set([...$("warnings").children].map((li) => li.textContent));
  for (const w of answer.warnings) {
    const line = typeof w === "string" ? w : w && w.message ? String(w.message) : JSON.stringify(w);
    if (!shown.has(line)) $("warnings").append(el("li", line));
    shown.add(line);
  }
  $("warnings").hidden = $("warnings").childElementCount === 0;
}

async function run() {
  const text = $("text").value;
  $("go").disabled = true;
  clearResults();
  status("working\u2026");
  let note = "";  // a word for the status line when all went well
  try {
    if (kind.endpoint) $("answer").hidden = false;
    if (kind.endpoint === "translate") {
      const answer = await post("/translate", { text });
      warn(answer);
      $("output").textContent = answer.translation;
      if (info.endpoints.includes("attention")) await translatorAttention(text, answer.translation);
    } else if (kind.endpoint === "generate") {
      const answer = await generate(text);
      if (info.endpoints.includes("attention")) note = await gptAttention(text, answer);
    } else {
      if (kind.endpoint === "classify") {
        const answer = await post("/classify", { text, top: 5 });
        warn(answer);
        showLabels(answer.classification);
      }
      if (info.endpoints.includes("attention")) await attention({ text }, "This map covers the text typed in.");
    }
    status(note);
  } catch (e) {
    clearMap();  // a failed request leaves no map behind, neither its own nor an earlier one
    status(e.message, true);
  } finally {
    $("go").disabled = false;
  }
}

async function generate(prompt) {  // streams the continuation into the page; resolves to the `done` answer
  const body = { prompt, stream: true, max_new_tokens: Number($("max-new").value),
                 temperature: Number($("temperature").value) };
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  const response = await send("/generate", body);
  const out = $("output");
  out.append(el("span", prompt, "prompt"));
  const written = el("span");
  out.append(written);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      throw new Refusal(`/generate: the connection broke (${e.message})`, 0);
    }
    if (chunk.done) throw new Refusal("/generate: the stream ended before its answer", 0);
    buffer += chunk.value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {  // one server-sent event: "event: NAME\ndata: JSON"
      const lines = buffer.slice(0, end).split("\n");
      buffer = buffer.slice(end + 2);
      const name = lines.find((l) => l.startsWith("event: ")).slice(7);
      const data = JSON.parse(lines.find((l) => l.startsWith("data: ")).slice(6));
      if (name === "token") written.textContent += data.text;
      else if (name === "error") throw new Refusal(`/generate: ${data.error}`, 0);
      else if (name === "done") {
        written.textContent = data.text;
        warn(data);
        return data;
      }
    }
  }
}

async function translatorAttention(text, translation) {
  // The map of the sentence and the translation shown; where the server refuses that translation as a target
  // (read again, its tokens may overflow the context), the model's own greedy translation's, saying so.
  const greedy = "this map covers the sentence and the model's own greedy translation, which may differ from " +
                 "the one shown";
  let why = "The translation is empty: ";
  if (translation.trim()) {
    try {
      return await attention({ text, target: translation }, "This map covers the sentence and the translation " +
                                                             "shown above.");
    } catch (e) {
      if (e.code !== 422) throw e;
      why = `The server refused the translation shown as the map's target (${e.message}): `;
    }
  }
  await attention({ text }, why + greedy + ".");
}

async function gptAttention(prompt, answer) {
  // The map of the prompt and the continuation shown; where the server refuses that text (too many tokens
  // for its --max-tokens, say), the prompt's alone, saying so. Resolves to a note for the status line.
  const n = answer.tokens;
  const whole = `This map covers the prompt and the continuation shown above (${n} new token${n === 1 ? "" : "s"}` +
                "; the first row and column are the model's start token, if it has one).";
  let why = "";
  if (answer.text && (prompt + answer.text).trim()) {
    try {
      await attention({ text: prompt + answer.text }, whole);
      return "";
    } catch (e) {
      if (e.code !== 422) throw e;
      why = ` (the server refused the prompt with its continuation: ${e.message})`;
    }
  }
  if (!prompt.trim()) return "no attention map: the prompt is empty and nothing was written" + why;
  await attention({ text: prompt }, `This map covers the prompt only${why || " (nothing was written)"}.`);
  return "";
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

async function attention(body, covers) {
  const answer = await post("/attention", body);
  warn(answer);
  maps = answer.maps;
  $("attention-section").hidden = false;
  $("map-covers").textContent = covers;
  const part = $("part");
  part.replaceChildren(...maps.map((m, i) => option(m.title, i)));
  part.value = String(Math.max(0, maps.findIndex((m) => m.part === "cross")));
  pickPart();
}

function option(text, value) {
  const o = el("option", text);
  o.value = value;
  return o;
}

function pickPart() {
  const m = maps[Number($("part").value)];
  if (!m) return;
  const layers = m.weights.length, heads = m.weights[0].length;
  $("layer").replaceChildren(...Array.from({ length: layers }, (_, i) => option(String(i), i)));
  $("layer").value = String(layers - 1);
  $("head").replaceChildren(option("mean of all", "mean"), ...Array.from({ length: heads }, (_, i) => option(String(i), i)));
  $("row").replaceChildren(option("every row", ""), ...m.queries.map((q, i) => option(`${i + 1}: ${short(q)}`, i)));
  const room = $("map-row").clientWidth - $("scale").offsetWidth - 150;  // less the query labels, about
  $("zoom").value = String(Math.min(CELL.max, Math.max(CELL.min, Math.floor(room / m.keys.length))));
  draw();
}

function matrix(m, layer, head) {  // (Tq, Tk): one head's weights, or the mean over the heads
  const heads = m.weights[layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, q) => row.map((_, k) => heads.reduce((sum, h) => sum + h[q][k], 0) / heads.length));
}

function shade(t) {  // 0 -> pale, 1 -> dark blue
  t = Math.min(1, Math.max(0, t));
  const from = [247, 251, 255], to = [8, 48, 107];
  return `rgb(${from.map((f, i) => Math.round(f + (to[i] - f) * t)).join(",")})`;
}

const short = (s) => (s.length > 14 ? s.slice(0, 13) + "\u2026" : s);

function labels(box, texts, className) {  // one span a token, with its whole text as its title
  box.replaceChildren(...texts.map((text) => { const s = el("span", short(text), className); s.title = text; return s; }));
  return [...box.children];
}

function place(spans, cell, put) {  // each label centred on its row or column; every step-th one shown
  const step = Math.ceil(LABEL / cell);  // shown labels are >= LABEL apart, so their boxes never overlap
  spans.forEach((s, i) => { put(s, i * cell + (cell - LABEL) / 2, i); s.hidden = i % step !== 0; });
}

function draw() {
  const m = maps[Number($("part").value)];
  if (!m) return;
  const w = matrix(m, Number($("layer").value), $("head").value);
  const cell = Number($("zoom").value);
  $("zoom-value").textContent = `${cell} px`;
  const keys = labels($("key-labels"), m.keys, "key"), queries = labels($("query-labels"), m.queries, "query");
  const tall = keys.map((s) => s.offsetHeight), wide = queries.map((s) => s.offsetWidth);  // before hiding
  const top = 10 + Math.max(0, ...tall), left = 10 + Math.max(0, ...wide);
  const width = cell * m.keys.length, height = cell * m.queries.length;
  $("map").style.gridTemplateColumns = `${left}px ${width}px`;
  $("map").style.gridTemplateRows = `${top}px ${height}px`;
  place(keys, cell, (s, at, i) => { s.style.left = `${at}px`; s.style.top = `${top - 6 - tall[i]}px`; });
  place(queries, cell, (s, at) => { s.style.top = `${at}px`; s.style.width = `${left - 8}px`; });
  const vmax = $("scale-mode").value === "one" ? 1 : Math.max(1e-9, ...w.map((row) => Math.max(...row)));
  const canvas = $("attention"), ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  const picked = $("row").value === "" ? null : Number($("row").value);
  w.forEach((row, q) => row.forEach((x, k) => {
    ctx.globalAlpha = picked === null || q === picked ? 1 : FADED;
    ctx.fillStyle = shade(x / vmax);
    ctx.fillRect(k * cell, q * cell, cell, cell);
  }));
  ctx.globalAlpha = 1;
  if (picked !== null) {
    ctx.strokeStyle = "#d9480f";
    ctx.lineWidth = 2;
    ctx.strokeRect(1, picked * cell + 1, width - 2, cell - 2);
  }
  if (picked !== null) queries[picked].classList.add("picked");
  readRow(m, w, picked);
  canvas.dataset.row = picked === null ? "" : String(picked);
  drawScale(vmax, height);
  view = { m, w, cell, q: null, k: null };
  hideTip();
  canvas.dataset.state = "drawn";
}

function readRow(m, w, q) {  // the picked row's largest weights, in words under the map
  const out = $("row-readout");
  out.hidden = q === null;
  out.textContent = "";
  if (q === null) return;
  const top = w[q].map((x, k) => [x, k]).sort((a, b) => b[0] - a[0]).slice(0, 5);
  out.textContent = `\u201c${m.queries[q]}\u201d (row ${q + 1}) attends most to: ` +
    top.map(([x, k]) => `\u201c${m.keys[k]}\u201d (column ${k + 1}) ${x.toFixed(3)}`).join(", ");
}

function pickRow(q) {  // picks out row q, or every row again if q is the row picked already
  const at = view.q === null ? null : [view.q, view.k];  // the cell pointed at stays pointed at
  $("row").value = $("row").value === String(q) ? "" : String(q);
  draw();
  if (at) point(...at);
}

function drawScale(vmax, height) {  // the colour bar beside the map: vmax at the top, 0 at the bottom
  const tall = Math.min(240, Math.max(120, height)), bar = $("scale-bar"), ctx = bar.getContext("2d");
  bar.height = tall;
  bar.style.height = `${tall}px`;
  for (let y = 0; y < tall; y++) {
    ctx.fillStyle = shade(1 - y / (tall - 1));
    ctx.fillRect(0, y, bar.width, 1);
  }
  const tick = (x) => (x === 0 ? "0" : String(Number(x.toPrecision(3))));
  $("scale-ticks").style.height = `${tall}px`;
  $("scale-ticks").replaceChildren(...[vmax, vmax / 2, 0].map((x, i) => {
    const s = el("span", tick(x));
    s.style.top = `${(i / 2) * 100}%`;
    return s;
  }));
}

function weight(x) {  // four decimals, and the size of a weight too small for them
  return x.toFixed(4) + (x > 0 && x < 5e-5 ? ` (${x.toExponential(1)})` : "");
}

function point(q, k) {  // shows the weight of cell (q, k): an outline on the map and a tip beside it
  const { m, w, cell } = view;
  view.q = q;
  view.k = k;
  const cursor = $("cursor");
  Object.assign(cursor.style, { left: `${k * cell}px`, top: `${q * cell}px`, width: `${cell}px`, height: `${cell}px` });
  cursor.hidden = false;
  const tip = $("tip");
  tip.textContent = `query \u201c${m.queries[q]}\u201d (row ${q + 1}) \u2192 key \u201c${m.keys[k]}\u201d ` +
                    `(column ${k + 1})\nweight ${weight(w[q][k])}`;
  Object.assign(tip.dataset, { query: q, key: k, weight: w[q][k] });
  tip.hidden = false;
  const r = $("attention").getBoundingClientRect();
  let x = r.left + (k + 1) * cell + 12, y = r.top + (q + 1) * cell + 8;
  if (x + tip.offsetWidth > window.innerWidth - 4) x = Math.max(4, r.left + k * cell - tip.offsetWidth - 12);
  if (y + tip.offsetHeight > window.innerHeight - 4) y = Math.max(4, r.top + q * cell - tip.offsetHeight - 8);
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}

function hideTip() {
  $("tip").hidden = true;
  $("cursor").hidden = true;
}

const canvas = $("attention");
canvas.addEventListener("mousemove", (event) => {
  if (!view) return;
  const r = canvas.getBoundingClientRect();
  const q = Math.floor((event.clientY - r.top) / view.cell), k = Math.floor((event.clientX - r.left) / view.cell);
  if (q >= 0 && q < view.w.length && k >= 0 && k < view.w[0].length) point(q, k);
  else hideTip();
});
canvas.addEventListener("click", (event) => {
  if (!view) return;
  const r = canvas.getBoundingClientRect(), q = Math.floor((event.clientY - r.top) / view.cell);
  if (q >= 0 && q < view.w.length) pickRow(q);
});
canvas.addEventListener("mouseleave", hideTip);
canvas.addEventListener("blur", hideTip);
canvas.addEventListener("keydown", (event) => {  // the arrow keys walk the cells; Escape hides the tip; Enter
  // picks out the row of the cell pointed at
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  if (!view || !(event.key in moves || event.key === "Escape" || event.key === "Enter")) return;
  event.preventDefault();
  if (event.key === "Escape") return hideTip();
  if (event.key === "Enter") {
    if (view.q !== null) pickRow(view.q);
    return;
  }
  const [dq, dk] = moves[event.key];
  const clamp = (x, n) => Math.min(n - 1, Math.max(0, x));
  point(clamp((view.q ?? 0) + (view.q === null ? 0 : dq), view.w.length),
        clamp((view.k ?? 0) + (view.k === null ? 0 : dk), view.w[0].length));
  $("cursor").scrollIntoView({ block: "nearest", inline: "nearest" });  // the scroll handler moves the tip
});
function follow() {  // after a scroll, the tip stays beside its cell while that cell is in sight
  if (!view || view.q === null || $("tip").hidden) return;
  const box = $("map-scroll").getBoundingClientRect(), r = canvas.getBoundingClientRect();
  const x = r.left + (view.k + 0.5) * view.cell, y = r.top + (view.q + 0.5) * view.cell;
  if (x < box.left || x > box.right || y < box.top || y > box.bottom) hideTip();
  else point(view.q, view.k);
}
$("map-scroll").addEventListener("scroll", follow);
window.addEventListener("scroll", follow);
$("part").addEventListener("change", pickPart);
for (const id of ["layer", "head", "row", "scale-mode", "zoom"]) $(id).addEventListener(id === "zoom" ? "input" : "change", draw);
$("go").addEventListener("click", run);
$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  apiKey = $("key").value.trim();
  sessionStorage.setItem("tformer-api-key", apiKey);
  start();
});
start();

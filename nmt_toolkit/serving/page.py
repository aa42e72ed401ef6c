"""The web page at ``/``: a text box, the language pair (or language detection), plain text or HTML, a button,
the translation (also sent by itself when the typing pauses for ``frontendTimeout`` ms, as on LibreTranslate's
page); and a file to translate when the server offers ``/translate_file``. Everything it needs is in
this one document (no external script, style sheet or font), so it works on a machine without internet.

It speaks only the public LibreTranslate API (``/languages``, ``/frontend/settings``, ``/translate``,
``/translate_file``), as any other client would. Translations are put into the page as text, never as markup:
an HTML translation is shown as its source, so nothing a model writes runs in the page."""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nmt-serve</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
.row { display: flex; gap: 1rem; flex-wrap: wrap; }
.row > div { flex: 1 1 20rem; }
textarea, output { width: 100%; min-height: 10rem; box-sizing: border-box; font: inherit; padding: .5rem;
  border: 1px solid #999; border-radius: 4px; white-space: pre-wrap; display: block; }
output { background: #f6f6f6; overflow-wrap: anywhere; }
output.html { font-family: ui-monospace, monospace; font-size: .9em; }
.controls { margin: 1rem 0; display: flex; gap: .5rem; align-items: center; flex-wrap: wrap; }
#detected { color: #555; min-height: 1.2em; margin: .3rem 0 0; }
#error { color: #a00; }
fieldset { border: 1px solid #ccc; border-radius: 4px; margin: 1.5rem 0; padding: .5rem 1rem 1rem; }
[hidden] { display: none !important; }
</style>
</head>
<body>
<h1>nmt-serve</h1>
<div class="controls">
  <label>From <select id="source"></select></label>
  <label>to <select id="target"></select></label>
  <label><input id="html" type="checkbox"> HTML</label>
  <label id="key-label" hidden>API key <input id="api-key" type="password" autocomplete="off"></label>
  <button id="translate" type="button">Translate</button>
  <span id="status" role="status"></span>
</div>
<div class="row">
  <div><textarea id="text" placeholder="Type or paste text" aria-label="text to translate"></textarea>
    <p id="detected" aria-live="polite"></p></div>
  <div><output id="translation" aria-label="translation" aria-live="polite"></output></div>
</div>
<fieldset id="files" hidden>
  <legend>Translate a file</legend>
  <div class="controls">
    <label>File <input id="file" type="file"></label>
    <button id="translate-file" type="button">Translate file</button>
    <a id="download" hidden>Download the translation</a>
  </div>
</fieldset>
<p id="error" role="alert"></p>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let pairs = {}, names = {}, settings = {}, fileFormats = [];

function fillTargets() {
  const source = $("source").value, chosen = $("target").value;
  let targets = pairs[source] || [];
  if (source === "auto")  // a detected language may be any served source: offer every target
    targets = [...new Set(Object.values(pairs).flat())];
  $("target").replaceChildren(...targets.map((t) => new Option(names[t] || t, t)));
  if (targets.includes(chosen)) $("target").value = chosen;
  $("detected").textContent = "";
}

async function getJson(path) {
  const response = await fetch(path);
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

async function load() {
  const [languages, found] = await Promise.all([getJson("languages"), getJson("frontend/settings")]);
  settings = found;
  names = Object.fromEntries(languages.map((l) => [l.code, l.name]));
  pairs = Object.fromEntries(languages.filter((l) => l.targets.length > 0).map((l) => [l.code, l.targets]));
  const sources = Object.keys(pairs).map((code) => new Option(names[code], code));
  $("source").replaceChildren(new Option("Detect language", "auto"), ...sources);
  const first = settings.language || {};
  if (first.source && pairs[first.source.code]) $("source").value = first.source.code;
  else if (sources.length) $("source").value = sources[0].value;
  fillTargets();
  if (first.target && [...$("target").options].some((o) => o.value === first.target.code))
    $("target").value = first.target.code;
  if (settings.charLimit) $("text").maxLength = settings.charLimit;
  $("key-label").hidden = !settings.apiKeys;
  fileFormats = settings.filesTranslation ? settings.supportedFilesFormat || [] : [];
  $("file").accept = fileFormats.join(",");
  $("files").hidden = fileFormats.length === 0;
}

async function post(path, body, init) {
  const response = await fetch(path, {method: "POST", body, ...init});
  let answer;
  try { answer = await response.json(); } catch (err) { throw new Error(response.status + " " + response.statusText); }
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

async function busy(button, work) {
  $("error").textContent = "";
  $("status").textContent = "translating…";
  button.disabled = true;
  try {
    await work();
    $("status").textContent = "done";
  } catch (err) {
    $("error").textContent = err.message;
    $("status").textContent = "";
  } finally {
    button.disabled = false;
  }
}

function showDetected(found) {
  if (!found) { $("detected").textContent = ""; return; }
  const name = names[found.language] || found.language;
  $("detected").textContent = "Detected: " + name + " (" + found.confidence + " %)";
}

// requests sent so far: an answer to an older one than the newest is dropped (typing sends one per pause)
let sent = 0, typing = null;

async function translate() {
  clearTimeout(typing);
  const mine = ++sent;
  const html = $("html").checked;
  const body = {q: $("text").value, source: $("source").value, target: $("target").value,
                format: html ? "html" : "text"};
  if ($("api-key").value) body.api_key = $("api-key").value;
  $("detected").textContent = "";
  let answer;
  try {
    answer = await post("translate", JSON.stringify(body), {headers: {"Content-Type": "application/json"}});
  } catch (err) {
    if (mine === sent) throw err;
    return;
  }
  if (mine !== sent) return;
  $("translation").classList.toggle("html", html);
  $("translation").value = answer.translatedText;  // text, never markup: HTML is shown as its source
  showDetected(answer.detectedLanguage);
}

async function translateFile() {
  $("download").hidden = true;
  const file = $("file").files[0];
  if (!file) throw new Error("choose a file first");
  const dot = file.name.lastIndexOf(".");
  const suffix = dot < 0 ? "" : file.name.slice(dot).toLowerCase();
  if (!fileFormats.includes(suffix))
    throw new Error(file.name + ": the server translates only " + fileFormats.join(", ") + " files");
  const form = new FormData();
  form.append("file", file);
  form.append("source", $("source").value);
  form.append("target", $("target").value);
  if ($("api-key").value) form.append("api_key", $("api-key").value);
  const answer = await post("translate_file", form, {});
  $("download").href = answer.translatedFileUrl;
  $("download").hidden = false;
  $("download").focus();
}

// as LibreTranslate's page does: translate once the typing pauses for frontendTimeout ms, or the choices change
function translateSoon() {
  clearTimeout(typing);
  if (settings.frontendTimeout > 0 && $("text").value.trim())
    typing = setTimeout(() => busy($("translate"), translate), settings.frontendTimeout);
}

$("source").addEventListener("change", fillTargets);
$("text").addEventListener("input", translateSoon);
for (const id of ["source", "target", "html"]) $(id).addEventListener("change", translateSoon);
$("translate").addEventListener("click", () => busy($("translate"), translate));
$("translate-file").addEventListener("click", () => busy($("translate-file"), translateFile));
$("text").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) busy($("translate"), translate);
});
load().catch((err) => { $("error").textContent = "cannot load the server's languages: " + err.message; });
</script>
</body>
</html>
"""

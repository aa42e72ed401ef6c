"""The web page at ``/``: a text box, the language pair, a button, the translation. Everything it needs is in
this one document (no external script, style sheet or font), so it works on a machine without internet."""

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
output { background: #f6f6f6; }
.controls { margin: 1rem 0; display: flex; gap: .5rem; align-items: center; flex-wrap: wrap; }
#error { color: #a00; }
</style>
</head>
<body>
<h1>nmt-serve</h1>
<div class="controls">
  <label>From <select id="source"></select></label>
  <label>to <select id="target"></select></label>
  <label id="key-label">API key <input id="api-key" type="password" autocomplete="off"></label>
  <button id="translate" type="button">Translate</button>
  <span id="status" role="status"></span>
</div>
<div class="row">
  <div><textarea id="text" placeholder="Type or paste text" aria-label="text to translate"></textarea></div>
  <div><output id="translation" aria-label="translation" aria-live="polite"></output></div>
</div>
<p id="error" role="alert"></p>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let pairs = {};

function fillTargets() {
  const targets = pairs[$("source").value] || [];
  $("target").replaceChildren(...targets.map((t) => new Option(t.name, t.code)));
}

async function loadLanguages() {
  const response = await fetch("languages");
  const languages = await response.json();
  const names = Object.fromEntries(languages.map((l) => [l.code, l.name]));
  pairs = Object.fromEntries(languages.map((l) =>
    [l.code, l.targets.map((t) => ({code: t, name: names[t] || t}))]));
  const sources = languages.filter((l) => l.targets.length > 0);
  $("source").replaceChildren(...sources.map((l) => new Option(l.name, l.code)));
  fillTargets();
}

async function translate() {
  $("error").textContent = "";
  $("status").textContent = "translating…";
  $("translate").disabled = true;
  const body = {q: $("text").value, source: $("source").value, target: $("target").value, format: "text"};
  if ($("api-key").value) body.api_key = $("api-key").value;
  try {
    const response = await fetch("translate", {method: "POST", headers: {"Content-Type": "application/json"},
                                               body: JSON.stringify(body)});
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    $("translation").value = answer.translatedText;
    $("status").textContent = "done";
  } catch (err) {
    $("error").textContent = err.message;
    $("status").textContent = "";
  } finally {
    $("translate").disabled = false;
  }
}

$("source").addEventListener("change", fillTargets);
$("translate").addEventListener("click", translate);
$("text").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) translate(); });
loadLanguages().catch((err) => { $("error").textContent = "cannot list languages: " + err.message; });
</script>
</body>
</html>
"""

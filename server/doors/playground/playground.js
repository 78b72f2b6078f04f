// The s2s playground: this server's KServe v2 REST API from a page. No dependencies, no build step.
"use strict";

(function () {
  const TOKEN_KEY = "s2s.playground.token";
  const $ = (id) => document.getElementById(id);
  const el = {
    form: $("form"), model: $("model"), modelInfo: $("model-info"), token: $("token"), input: $("input"),
    beam: $("beam"), maxTokens: $("max-tokens"), run: $("run"), error: $("error"), outputs: $("outputs"),
    status: $("status"), empty: $("empty"), languages: $("languages"), source: $("source-lang"),
    target: $("target-lang"), results: $("results"), request: $("request-meta"),
  };
  const EXAMPLE = { translation: "Save changes\nOpen the file", other: "One input per line" };
  const configs = new Map(); // model name -> {task, max_tokens, max_beam_width, ...} (strings)
  let loading = null; // the repository index request in flight, shared
  let running = false;

  // ---- HTTP ---------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const headers = {};
    const token = el.token.value.trim();
    if (token) headers["Authorization"] = "Bearer " + token;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let resp;
    try {
      resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new ApiError(0, "could not reach the server (" + e.message + ")");
    }
    const text = await resp.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (e) {
      if (resp.ok) throw new ApiError(resp.status, "the server's answer is not JSON");
    }
    if (!resp.ok) {
      const msg = data && typeof data.error === "string" ? data.error : (text.slice(0, 300) || resp.statusText);
      throw new ApiError(resp.status, msg);
    }
    return data;
  }

  // ---- error box ----------------------------------------------------------------------------------
  function showError(what, e) {
    const status = e instanceof ApiError && e.status ? "HTTP " + e.status + ": " : "";
    el.error.textContent = "";
    const head = document.createElement("strong");
    head.textContent = what;
    const msg = document.createElement("span");
    msg.className = "error-message";
    msg.textContent = status + e.message;
    el.error.append(head, " ", msg);
    if (e instanceof ApiError && e.status === 401) {
      const hint = document.createElement("span");
      hint.className = "error-hint";
      hint.textContent = "This server needs an API token: enter it above.";
      el.error.append(hint);
    }
    el.error.hidden = false;
  }

  function clearError() {
    el.error.hidden = true;
    el.error.textContent = "";
  }

  // ---- models -------------------------------------------------------------------------------------
  function param(config, key) {
    const p = config && config.parameters && config.parameters[key];
    return p ? p.string_value : undefined;
  }

  function loadModels() {
    if (!loading) loading = fetchModels().finally(() => { loading = null; });
    return loading;
  }

  async function fetchModels() {
    const previous = el.model.value;
    let index;
    try {
      index = await api("POST", "/v2/repository/index");
    } catch (e) {
      el.model.replaceChildren(new Option("(no models: see the error)", ""));
      el.modelInfo.textContent = "";
      showError("Could not list the models.", e);
      return false;
    }
    const names = [];
    for (const m of index) if (!names.includes(m.name)) names.push(m.name);
    // Chosen before the list is shown, so that a pick made as soon as it shows is never undone.
    const pick = names.includes(previous) ? previous : await translationModel(names);
    el.model.replaceChildren(...names.map((name) => {
      const versions = index.filter((m) => m.name === name);
      const latest = versions[versions.length - 1];
      const label = name + " · v" + latest.version + (latest.state === "READY" ? "" : " (" + latest.state.toLowerCase() + ")");
      return new Option(label, name);
    }));
    if (!names.length) {
      el.model.replaceChildren(new Option("(the server serves no models)", ""));
    }
    if (pick) el.model.value = pick;
    clearError();
    await modelChanged();
    return names.length > 0;
  }

  async function configOf(name) {
    if (!configs.has(name)) configs.set(name, await api("GET", "/v2/models/" + encodeURIComponent(name) + "/config"));
    return configs.get(name);
  }

  // The page's example input is a translation's: the first translation model is the one shown first (the first by
  // name where none is served).
  async function translationModel(names) {
    for (const name of names) {
      try {
        if (param(await configOf(name), "task") === "translation") return name;
      } catch (e) { /* its configuration is read again, with the error shown, if it is picked */ }
    }
    return names[0] || "";
  }

  async function modelChanged() {
    const name = el.model.value;
    if (!name) return;
    let config;
    try {
      config = await configOf(name);
    } catch (e) {
      showError("Could not read the configuration of " + name + ".", e);
      return;
    }
    if (el.model.value !== name) return; // changed again meanwhile
    const task = param(config, "task") || "";
    const maxBeam = parseInt(param(config, "max_beam_width"), 10);
    const defaultBeam = parseInt(param(config, "default_beam_width"), 10);
    const maxTokens = parseInt(param(config, "max_tokens"), 10);
    const maxInputs = param(config, "max_inputs_per_request");
    const maxChars = param(config, "max_input_chars");
    if (maxBeam > 0) {
      el.beam.max = String(maxBeam);
      el.beam.nextElementSibling.textContent = "1 = greedy (max " + maxBeam + ")";
    }
    if (defaultBeam > 0) {
      el.beam.value = String(defaultBeam); // the model's own default: what a request that names none gets
      el.beam.nextElementSibling.textContent += "; model default " + defaultBeam;
    }
    if (maxTokens > 0) {
      el.maxTokens.max = String(maxTokens);
      el.maxTokens.nextElementSibling.textContent = "0 = default (max " + maxTokens + ")";
    }
    el.run.textContent = task === "translation" ? "Translate" : "Generate";
    el.input.placeholder = task === "translation" ? EXAMPLE.translation : EXAMPLE.other;
    showLanguages(config);
    const facts = [];
    if (task) facts.push("task: " + task);
    if (maxInputs) facts.push("up to " + maxInputs + " lines per request");
    if (maxChars) facts.push(maxChars + " characters per line");
    el.modelInfo.textContent = facts.join(" · ");
    validate();
  }

  // ---- languages ----------------------------------------------------------------------------------
  let names = null;
  try {
    names = new Intl.DisplayNames(["en"], { type: "language" });
  } catch (e) { /* an older browser: codes only */ }

  function languageName(code) {
    try {
      const name = names && names.of(code);
      return name && name !== code ? name + " (" + code + ")" : code;
    } catch (e) {
      return code; // a model's own code ("__xx__", "jpn_Jpan") is no BCP 47 tag
    }
  }

  function fill(select, codes, preferred) {
    const previous = select.value;
    select.replaceChildren(...codes.map((c) => new Option(languageName(c), c)));
    const pick = [previous, ...preferred].find((c) => c && codes.includes(c));
    if (pick) select.value = pick;
  }

  // The model's languages from its config (source_languages / target_languages, comma-separated): pickers for a
  // model that knows them, none for one that does not (addition).
  function showLanguages(config) {
    const list = (key) => (param(config, key) || "").split(",").filter((c) => c);
    const sources = list("source_languages"), targets = list("target_languages");
    el.languages.hidden = !targets.length;
    if (!targets.length) return;
    fill(el.source, sources, [param(config, "default_source_language"), "en"]);
    const other = targets.find((c) => c !== el.source.value);
    fill(el.target, targets, [param(config, "default_target_language"), other]);
  }

  // The page shows out-of-range values but still sends them: the server's own message says why they fail.
  function validate() {
    for (const input of [el.beam, el.maxTokens]) input.setAttribute("aria-invalid", String(!input.checkValidity()));
  }

  // ---- run ----------------------------------------------------------------------------------------
  function targetLang(model) {
    const m = /-([a-z]{2})-([a-z]{2})$/.exec(model);
    return m ? m[2] : "";
  }

  const chars = (s) => Array.from(s).length;

  function render(model, texts, outputs, counts, timing, ms, target) {
    const lang = target || targetLang(model);
    const server = timing && typeof timing.total_seconds === "number"
      ? "server " + (timing.total_seconds * 1000).toFixed(0) + " ms (first token " +
        (timing.time_to_first_token_seconds * 1000).toFixed(0) + " ms) · "
      : "";
    el.request.textContent = server + "round trip " + ms.toFixed(0) + " ms · " + texts.length +
      (texts.length === 1 ? " line" : " lines") + " in one request";
    el.request.hidden = false;
    const items = texts.map((text, i) => {
      const out = outputs[i] === undefined ? "" : String(outputs[i]);
      const li = document.createElement("li");
      li.className = "output";
      const src = document.createElement("p");
      src.className = "src";
      src.textContent = text;
      const dst = document.createElement("p");
      dst.className = "out";
      if (lang) dst.lang = lang;
      dst.textContent = out;
      const meta = document.createElement("p");
      meta.className = "meta";
      const tokens = counts.input && counts.output && counts.input[i] !== undefined
        ? counts.input[i] + " tokens in → " + counts.output[i] + " tokens out · "
        : "";
      meta.textContent = tokens + chars(text) + " chars in → " + chars(out) + " chars out";
      li.append(src, dst, meta);
      return li;
    });
    el.outputs.replaceChildren(...items);
  }

  // A new request, or a refusal: what an earlier request showed is gone, so that nothing on the page reads as the
  // answer to this one.
  function clearOutputs() {
    el.outputs.replaceChildren();
    el.request.textContent = "";
    el.request.hidden = true;
    el.status.textContent = "";
    el.empty.hidden = true;
  }

  // On a narrow screen the results sit below the form: brought into view once they are there.
  const calm = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  function reveal(box) {
    const top = box.getBoundingClientRect().top;
    if (top < 0 || top > window.innerHeight * 0.6) box.scrollIntoView({ block: "start", behavior: calm ? "auto" : "smooth" });
  }

  async function run() {
    if (running) return;
    running = true;
    el.run.disabled = true;
    clearOutputs();
    clearError();
    el.outputs.dataset.state = "running";
    el.outputs.setAttribute("aria-busy", "true");
    try {
      if (!el.model.value && !(await loadModels())) {
        el.outputs.dataset.state = "error";
        return;
      }
      const model = el.model.value;
      const texts = el.input.value.split(/\r?\n/).filter((line) => line.trim() !== "");
      if (!texts.length) {
        showError("Nothing to send.", new Error("type at least one line of input."));
        el.outputs.dataset.state = "error";
        return;
      }
      el.status.textContent = (el.run.textContent === "Translate" ? "Translating " : "Generating ") + texts.length +
        (texts.length === 1 ? " line…" : " lines…");
      const body = {
        inputs: [{ name: "text_input", datatype: "BYTES", shape: [texts.length], data: texts }],
        outputs: [{ name: "text_output" }, { name: "input_tokens" }, { name: "output_tokens" }],
        parameters: { max_tokens: parseInt(el.maxTokens.value, 10) || 0, beam_width: parseInt(el.beam.value, 10) || 0,
                      timings: true },
      };
      const target = el.languages.hidden ? "" : el.target.value;
      if (target) {
        if (el.source.value) body.parameters.source_language = el.source.value;
        body.parameters.target_language = target;
      }
      const t0 = performance.now();
      let answer;
      try {
        answer = await api("POST", "/v2/models/" + encodeURIComponent(model) + "/infer", body);
      } catch (e) {
        el.status.textContent = "";
        showError(model + " refused the request.", e);
        el.outputs.dataset.state = "error";
        return;
      }
      const ms = performance.now() - t0;
      const tensor = (name) => (answer.outputs || []).find((o) => o.name === name);
      const out = tensor("text_output");
      const counts = { input: (tensor("input_tokens") || {}).data, output: (tensor("output_tokens") || {}).data };
      clearError();
      render(model, texts, out ? out.data : [], counts, answer.parameters, ms, /^[a-z]{2,3}(-|$)/.test(target) ? target : "");
      el.status.textContent = texts.length + (texts.length === 1 ? " output" : " outputs") + " from " + model +
        " v" + answer.model_version;
      el.outputs.dataset.state = "done";
    } finally {
      reveal(el.outputs.dataset.state === "error" && !el.error.hidden ? el.error : el.results);
      el.outputs.removeAttribute("aria-busy");
      el.run.disabled = false;
      running = false;
    }
  }

  // ---- wiring -------------------------------------------------------------------------------------
  try {
    el.token.value = sessionStorage.getItem(TOKEN_KEY) || "";
  } catch (e) { /* storage off: the field still works for this page */ }
  el.token.addEventListener("change", () => {
    try {
      const token = el.token.value.trim();
      if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* ignore */ }
    configs.clear();
    loadModels();
  });
  el.model.addEventListener("change", () => { clearError(); modelChanged(); });
  el.beam.addEventListener("input", validate);
  el.maxTokens.addEventListener("input", validate);
  el.form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      run();
    }
  });
  loadModels();
})();

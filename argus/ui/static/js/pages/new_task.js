// New task: a YAML editor with templates, checked by the server as you type
// (POST /tasks/validate) and on submit (POST /tasks). Errors and warnings appear inline.

import { request, errorText, ApiError } from "../api.js";
import { h, replace, debounce, notice } from "../dom.js";
import { paths } from "./data.js";

const TEMPLATES = [
  ["ppo", "PPO"], ["grpo", "GRPO"], ["sft", "SFT"], ["advanced", "Advanced"],
];
const DRAFT_KEY = "argus.newTaskDraft"; // the YAML only (sessionStorage), never a token

/** A template with its comments' <shared> and <you> made this deployment's paths. */
async function loadTemplate(name, me) {
  const resp = await fetch(new URL(`../../templates/${name}.yaml`, import.meta.url), { cache: "no-cache" });
  if (!resp.ok) throw new Error(`template ${name}: HTTP ${resp.status}`);
  const p = paths(me);
  return (await resp.text()).replaceAll("<shared>", p.shared).replaceAll("<you>", (me && me.user_id) || "<you>");
}

export async function render(main, params, ctx) {
  ctx.setTitle("New task");
  const editor = h("textarea", {
    id: "spec-editor", name: "spec", rows: 28, spellcheck: "false", autocomplete: "off",
    autocapitalize: "off", wrap: "off", class: "code", "aria-describedby": "spec-help check-result",
  });
  const result = h("div", { id: "check-result", "aria-live": "polite" });
  const validateBtn = h("button", { type: "button", class: "btn", id: "validate" }, "Check");
  const submitBtn = h("button", { type: "submit", class: "btn btn-primary", id: "submit-task" }, "Submit task");
  const templateButtons = TEMPLATES.map(([name, label]) =>
    h("button", { type: "button", class: "btn", "data-template": name, onclick: () => useTemplate(name) }, label));

  const form = h("form", { class: "new-task", "aria-labelledby": "new-h" },
    h("div", { class: "templates", role: "group", "aria-label": "Templates" },
      h("span", { class: "muted" }, "Start from a template:"), templateButtons),
    h("label", { for: "spec-editor" }, "TaskSpec (YAML)"),
    h("p", { id: "spec-help", class: "help" },
      "Paths: your files are under $HOME/datasets, $HOME/models and $HOME/code; shared read-only ",
      "data under $HOME/common/datasets and $HOME/common/hf (see the ", h("a", { href: "#/data" }, "Data"), " page). ",
      "$HOME is ", h("code", {}, paths(ctx.me).home), " and the common folders are under ", h("code", {}, paths(ctx.me).shared),
      "; outputs go to ", h("a", { href: "#/data/jobs" }, "$HOME/jobs"), ". The server checks the spec as you type."),
    editor,
    h("div", { class: "actions" }, validateBtn, submitBtn),
    result);

  replace(main,
    h("div", { class: "page-head" }, h("h1", { id: "new-h" }, "New task")),
    form);

  let seq = 0;
  async function validate() {
    const mine = ++seq;
    const text = editor.value;
    if (!text.trim()) { replace(result); return null; }
    try {
      const answer = await request("POST", "/tasks/validate", { text, contentType: "application/yaml" });
      if (mine !== seq) return null;
      showCheck(answer);
      return answer;
    } catch (err) {
      if (mine !== seq) return null;
      // A 400 may carry the problems too (a YAML body that is no mapping): shown the same way.
      if (err instanceof ApiError && err.fieldErrors.length) {
        showCheck({ ok: false, errors: err.fieldErrors, warnings: err.warnings });
      } else {
        replace(result, notice("error", errorText(err)));
      }
      return null;
    }
  }

  function showCheck(answer) {
    const errors = answer.errors || [];
    const warnings = answer.warnings || [];
    replace(result,
      errors.length ? notice("error", h("strong", {}, "The spec has errors:"),
        h("ul", { class: "errors", id: "spec-errors" }, errors.map((e) => h("li", {},
          e.field ? h("code", {}, e.field) : null, e.field ? ": " : null, e.message ?? String(e))))) : null,
      warnings.length ? warningBox(warnings) : null,
      answer.ok && !errors.length ? notice("ok", "The spec is valid.") : null);
  }

  function warningBox(warnings) {
    return notice("warning", h("strong", {}, "Warnings (the task can still run):"),
      h("ul", { class: "warnings", id: "spec-warnings" }, warnings.map((w) => h("li", {}, w))));
  }

  const validateSoon = debounce(validate, 600);
  // A template fetched while the user types (or picks another template) must not overwrite
  // what they typed: each load remembers the edit count it started from.
  let edits = 0;
  editor.addEventListener("input", () => {
    edits += 1;
    sessionStorage.setItem(DRAFT_KEY, editor.value);
    validateSoon();
  });
  validateBtn.addEventListener("click", validate);

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    seq += 1; // drop answers of checks still in flight
    submitBtn.disabled = true;
    try {
      const answer = await request("POST", "/tasks", { text: editor.value, contentType: "application/yaml" });
      sessionStorage.removeItem(DRAFT_KEY);
      replace(result, notice("ok", "Submitted ", h("a", { href: `#/tasks/${encodeURIComponent(answer.task_id)}`, id: "new-task-link" }, answer.task_id), "."),
        answer.warnings && answer.warnings.length ? warningBox(answer.warnings) : null);
      ctx.lastSubmitted = answer;
      ctx.navigate(`#/tasks/${encodeURIComponent(answer.task_id)}`);
    } catch (err) {
      const detail = err.detail || errorText(err);
      const errors = (err.fieldErrors || []).filter((e) => (e.field ? `${e.field}: ${e.message}` : e.message) !== detail);
      replace(result, notice("error", h("strong", {}, "Not submitted: "), h("span", { id: "submit-error" }, detail),
        errors.length ? h("ul", { class: "errors" }, errors.map((e) => h("li", {}, e.field ? `${e.field}: ` : "", e.message ?? String(e)))) : null),
        err.warnings && err.warnings.length ? warningBox(err.warnings) : null);
      result.querySelector("[role=alert]")?.focus?.();
    } finally {
      submitBtn.disabled = false;
    }
  });

  async function useTemplate(name) {
    const startedAt = ++edits;
    try {
      const text = await loadTemplate(name, ctx.me);
      if (edits !== startedAt) return; // typed into, or another template picked, meanwhile
      editor.value = text;
      sessionStorage.setItem(DRAFT_KEY, editor.value);
      templateButtons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.template === name)));
      editor.focus();
      editor.setSelectionRange(0, 0);
      editor.scrollTop = 0;
      validate();
    } catch (err) {
      replace(result, notice("error", errorText(err)));
    }
  }

  const draft = sessionStorage.getItem(DRAFT_KEY);
  const wanted = params.q && params.q.template;
  if (wanted && TEMPLATES.some(([n]) => n === wanted)) await useTemplate(wanted);
  else if (draft) { editor.value = draft; validate(); } else await useTemplate("advanced");
  return () => { seq += 1; };
}

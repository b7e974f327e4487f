// Tasks: mine (admin: everyone's, or one user's), newest first, filtered by state, kept
// up to date from the event stream without reloading the page.

import { get, query, errorText } from "../api.js";
import { onEvent, taskIdOf } from "../events.js";
import { h, replace, timeEl, stateBadge, fmtDemand, STATES, debounce, notice } from "../dom.js";

const PAGE_SIZE = 50;

export async function render(main, params, ctx) {
  ctx.setTitle("Tasks");
  const q = params.q || {};
  const isAdmin = Boolean(ctx.me && ctx.me.is_admin);
  const filters = { state: q.state || "", user: isAdmin ? (q.user || "") : "", offset: Number(q.offset || 0) || 0 };

  const stateSelect = h("select", { id: "filter-state", name: "state" },
    h("option", { value: "" }, "All states"),
    STATES.map((s) => h("option", { value: s, selected: s === filters.state }, s)));
  const userInput = isAdmin
    ? h("input", { id: "filter-user", name: "user", type: "text", value: filters.user, placeholder: "all users", autocomplete: "off" })
    : null;
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter tasks" },
    h("div", { class: "field-inline" }, h("label", { for: "filter-state" }, "State"), stateSelect),
    isAdmin ? h("div", { class: "field-inline" }, h("label", { for: "filter-user" }, "User"), userInput) : null,
    h("button", { type: "submit", class: "btn" }, "Apply"));
  const apply = (ev) => {
    if (ev) ev.preventDefault();
    const next = { state: stateSelect.value, user: userInput ? userInput.value.trim() : "" };
    ctx.navigate(`#/tasks${query(next)}`);
  };
  form.addEventListener("submit", apply);
  stateSelect.addEventListener("change", apply);

  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" });
  const tbody = h("tbody");
  const table = h("table", { class: "data", id: "tasks-table" },
    h("caption", { class: "visually-hidden" }, "Tasks, newest first"),
    h("thead", {}, h("tr", {},
      h("th", { scope: "col" }, "Task"),
      isAdmin ? h("th", { scope: "col" }, "User") : null,
      h("th", { scope: "col" }, "Workload"),
      h("th", { scope: "col" }, "State"),
      h("th", { scope: "col", id: "demand-col" }, "Demand"),
      h("th", { scope: "col" }, "Attempts"),
      h("th", { scope: "col" }, "Submitted"),
      h("th", { scope: "col" }, "Updated"))),
    tbody);
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const errorBox = h("div");

  replace(main,
    h("div", { class: "page-head" },
      h("h1", {}, !isAdmin ? "My tasks" : filters.user ? `Tasks of ${filters.user}` : "All tasks"),
      h("a", { class: "btn btn-primary", href: "#/tasks/new" }, "New task")),
    form, errorBox, status, h("div", { class: "table-wrap" }, table), pager);

  let abort = null;
  async function load() {
    if (abort) abort.abort();
    abort = new AbortController();
    try {
      const page = await get(`/tasks${query({ state: filters.state, user: filters.user, limit: PAGE_SIZE, offset: filters.offset })}`, { signal: abort.signal });
      replace(errorBox);
      draw(page);
    } catch (err) {
      if (err.name === "AbortError") return;
      replace(errorBox, notice("error", errorText(err)));
    }
  }

  function draw(page) {
    const items = Array.isArray(page) ? page : (page.items || []);
    const total = Array.isArray(page) ? items.length : (page.total ?? items.length);
    const showDemand = items.some((t) => t.demand);
    table.querySelector("#demand-col").hidden = !showDemand;
    replace(tbody, items.map((t) => h("tr", { "data-task-id": t.task_id },
      h("td", {}, h("a", { href: `#/tasks/${encodeURIComponent(t.task_id)}`, class: "mono" }, t.task_id)),
      isAdmin ? h("td", {}, t.user ?? "") : null,
      h("td", {}, [t.workload, t.kind === "advanced" ? h("span", { class: "tag" }, "advanced") : null]),
      h("td", {}, stateBadge(t.state)),
      showDemand ? h("td", {}, fmtDemand(t.demand)) : null,
      h("td", { class: "num" }, String(t.attempts_count ?? (Array.isArray(t.attempts) ? t.attempts.length : t.attempts ?? ""))),
      h("td", {}, timeEl(t.created_at ?? t.submitted_at)),
      h("td", {}, timeEl(t.updated_at)))));
    if (items.length === 0) {
      tbody.append(h("tr", {}, h("td", { colspan: 8, class: "empty" },
        filters.state ? `No tasks in state ${filters.state}.` : "No tasks yet. ",
        filters.state ? null : h("a", { href: "#/tasks/new" }, "Submit one."))));
    }
    status.textContent = total ? `${total} task${total === 1 ? "" : "s"}` : "";
    const prev = filters.offset > 0 ? { ...filters, offset: Math.max(0, filters.offset - PAGE_SIZE) } : null;
    const next = filters.offset + PAGE_SIZE < total ? { ...filters, offset: filters.offset + PAGE_SIZE } : null;
    replace(pager,
      prev ? h("a", { href: `#/tasks${query(prev)}` }, "← Newer") : null,
      (prev || next) ? h("span", { class: "muted" }, `${filters.offset + 1}–${Math.min(total, filters.offset + PAGE_SIZE)} of ${total}`) : null,
      next ? h("a", { href: `#/tasks${query(next)}` }, "Older →") : null);
  }

  // Any task event may change the list (a new task, a state change): reload, debounced.
  const reload = debounce(load, 200);
  const off = onEvent((rec) => { if (taskIdOf(rec)) reload(); });
  // A slow safety net for missed events (e.g. while the stream reconnects).
  const timer = setInterval(load, 30000);
  await load();
  return () => { off(); clearInterval(timer); if (abort) abort.abort(); };
}

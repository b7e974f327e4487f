// Tasks: mine (admin: everyone's, or one user's), newest first, filtered by state, kept
// up to date from the event stream without reloading the page. Each row says at a glance
// what a task is (id, name), what it holds (GPUs), how old it is, how long its latest
// attempt has run, how far training got, and why it waits or failed.

import { get, query, errorText } from "../api.js";
import { onEvent, taskIdOf } from "../events.js";
import {
  h, replace, stateBadge, STATES, TERMINAL, WAITING, debounce, notice, fmtAge, fmtTime, nowS, clip, clipped,
  startsIn,
} from "../dom.js";

const PAGE_SIZE = 50;

export async function render(main, params, ctx) {
  ctx.setTitle("Tasks");
  const q = params.q || {};
  const isAdmin = Boolean(ctx.me && ctx.me.is_admin);
  // Pages are walked by cursor (keyset): ``cursor`` is where this page starts, ``back``
  // the cursors of the pages before it ("-" for the first), for "Newer".
  const back = q.back ? String(q.back).split(",") : [];
  const filters = { state: q.state || "", user: isAdmin ? (q.user || "") : "", cursor: q.cursor || "" };

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
      isAdmin ? h("th", { scope: "col", class: "col-user" }, "User") : null,
      h("th", { scope: "col" }, "State"),
      h("th", { scope: "col", class: "num", title: "GPUs of the whole gang (nodes × GPUs per node)" }, "GPUs"),
      h("th", { scope: "col", class: "col-age", title: "Since it was submitted" }, "Age"),
      h("th", { scope: "col", class: "col-ran", title: "How long the latest attempt ran (so far)" }, "Ran"),
      h("th", { scope: "col", class: "col-progress" }, "Progress"),
      h("th", { scope: "col", class: "col-why" }, "Why it waits / failed"),
      h("th", { scope: "col", class: "col-starts", title: "While it waits: when it starts, 80 % sure, else ~expected" }, "Starts"))),
    tbody);
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const errorBox = h("div");

  replace(main,
    h("div", { class: "page-head" },
      h("h1", {}, !isAdmin ? "My tasks" : filters.user ? `Tasks of ${filters.user}` : "All tasks"),
      h("a", { class: "btn btn-primary", href: "#/tasks/new" }, "New task")),
    form, errorBox, status, h("div", { class: "table-wrap" }, table), pager);

  // One load at a time; a reload asked for meanwhile runs once when it ends. (Aborting the
  // load in flight for each new event starved the list on a busy server: events kept
  // coming faster than a load could finish, and the page never drew.)
  const abort = new AbortController();  // on leaving the page
  let inFlight = null;
  let again = false;
  async function load() {
    if (inFlight) {
      again = true;
      return inFlight;
    }
    inFlight = (async () => {
      try {
        do {
          again = false;
          const page = await get(`/tasks${query({ state: filters.state, user: filters.user, limit: PAGE_SIZE, cursor: filters.cursor })}`, { signal: abort.signal });
          replace(errorBox);
          draw(page);
        } while (again && !abort.signal.aborted);
      } catch (err) {
        if (err.name !== "AbortError") replace(errorBox, notice("error", errorText(err)));
      } finally {
        inFlight = null;
      }
    })();
    return inFlight;
  }

  function draw(page) {
    const items = Array.isArray(page) ? page : (page.items || []);
    const total = Array.isArray(page) ? items.length : (page.total ?? items.length);
    replace(tbody, items.map((t) => row(t, isAdmin)));
    if (items.length === 0) {
      tbody.append(h("tr", {}, h("td", { colspan: isAdmin ? 9 : 8, class: "empty" },
        filters.state ? `No tasks in state ${filters.state}.` : "No tasks yet. ",
        filters.state ? null : h("a", { href: "#/tasks/new" }, "Submit one."))));
    }
    status.textContent = total ? `${total} task${total === 1 ? "" : "s"}` : "";
    const base = { state: filters.state, user: filters.user };
    const prevCursor = back.length ? back[back.length - 1] : null;
    const prev = prevCursor !== null
      ? { ...base, cursor: prevCursor === "-" ? "" : prevCursor, back: back.slice(0, -1).join(",") } : null;
    const next = page.next_cursor
      ? { ...base, cursor: page.next_cursor, back: [...back, filters.cursor || "-"].join(",") } : null;
    const first = back.length * PAGE_SIZE + 1;
    replace(pager,
      prev ? h("a", { href: `#/tasks${query(prev)}` }, "← Newer") : null,
      (prev || next) ? h("span", { class: "muted" }, `${first}–${first + items.length - 1} of ${total}`) : null,
      next ? h("a", { href: `#/tasks${query(next)}` }, "Older →") : null);
  }

  // Any task event may change the list (a new task, a state change): reload, debounced.
  const reload = debounce(load, 200);
  const off = onEvent((rec) => { if (taskIdOf(rec)) reload(); });
  // A slow safety net for missed events (e.g. while the stream reconnects).
  const timer = setInterval(load, 30000);
  // Ages and run times move on between loads.
  const ticker = setInterval(() => tick(tbody), 5000);
  await load();
  return () => { off(); clearInterval(timer); clearInterval(ticker); abort.abort(); };
}

function row(t, isAdmin) {
  const link = h("a", { href: `#/tasks/${encodeURIComponent(t.task_id)}`, class: "mono task-id" }, t.task_id);
  return h("tr", { "data-task-id": t.task_id },
    h("td", { class: "col-task" }, h("div", { class: "task-cell" }, link,
      t.name ? clipped(t.name, 60, { class: "task-name" }) : null)),
    isAdmin ? h("td", { class: "col-user" }, t.user ?? "") : null,
    h("td", {}, stateBadge(t.state)),
    h("td", { class: "num" }, t.gpus ? String(t.gpus) : ""),
    h("td", { class: "col-age" }, since(t.created_at, null, `submitted ${fmtTime(t.created_at)}`)),
    h("td", { class: "col-ran" }, ran(t)),
    h("td", { class: "col-progress" }, progress(t)),
    h("td", { class: "col-why" }, why(t)),
    h("td", { class: "col-starts" }, WAITING.has(t.state) ? startsIn(t, nowS()) : null));
}

/** A duration from `start` to `end` (or to now, kept current by tick()). */
function since(start, end, title) {
  if (!start) return null;
  return h("span", { class: "dur", "data-since": end ? null : String(start), title },
    fmtAge((end || nowS()) - start));
}

function tick(root) {
  const now = nowS();
  root.querySelectorAll("[data-since]").forEach((el) => {
    el.textContent = fmtAge(now - Number(el.dataset.since));
  });
}

function ran(t) {
  if (!t.started_at) return null;
  const n = Number(t.attempts) || 0;
  const title = `attempt ${n || 1} started ${fmtTime(t.started_at)}` +
    (t.ended_at ? `, ended ${fmtTime(t.ended_at)}` : "");
  return [since(t.started_at, t.ended_at || (TERMINAL.has(t.state) ? t.updated_at : null), title),
    n > 1 ? h("span", { class: "muted attempt-no", title: `${n} attempts` }, ` (#${n})`) : null];
}

function progress(t) {
  if (t.step === null || t.step === undefined) return null;
  const total = Number(t.total_steps) || 0;
  const text = total ? `step ${t.step} of ${total}` : `step ${t.step}`;
  return h("div", { class: "step", title: text },
    h("span", {}, total ? `${t.step} of ${total}` : String(t.step)),
    total ? h("progress", { max: total, value: Math.min(t.step, total), "aria-label": text }) : null);
}

function why(t) {
  // Why it waits now comes first: a task waiting for a retry would otherwise show its last
  // attempt's failure (the task page has it).
  if (t.wait_reason && WAITING.has(t.state)) {
    const text = `${t.wait_reason}: ${t.wait_message || ""}`;
    return h("span", { class: "why", title: text },
      h("strong", {}, t.wait_reason), t.wait_message ? [": ", clip(t.wait_message, 140)] : null);
  }
  if (t.failure_kind) {
    const text = `${t.failure_kind}: ${t.error_summary || ""}`;
    return h("span", { class: "why", title: text },
      h("span", { class: "failure" }, t.failure_kind),
      t.error_summary ? [": ", clip(t.error_summary, 140)] : null);
  }
  if (t.error_summary) return clipped(t.error_summary, 140, { class: "why" });
  return null;
}

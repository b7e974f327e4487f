// Queue: the tasks waiting for resources, in the order the scheduler looks at them, each
// with the reason it waits (other users' entries come anonymised from the API).

import { get, errorText } from "../api.js";
import { onEvent, taskIdOf } from "../events.js";
import { h, replace, timeEl, stateBadge, fmtDemand, notice, debounce } from "../dom.js";

export async function render(main, _params, ctx) {
  ctx.setTitle("Queue");
  const tbody = h("tbody");
  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" });
  const errorBox = h("div");
  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "Queue")),
    h("p", { class: "help" }, "Tasks waiting for their whole GPU gang, first in line at the top. ",
      "A task starts only when every node it needs has enough free GPUs at the same time."),
    errorBox, status,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "queue-table" },
      h("caption", { class: "visually-hidden" }, "Waiting tasks in order"),
      h("thead", {}, h("tr", {}, ["Position", "Task", "User", "Priority", "Demand", "State", "Why it waits", "Next try", "Waiting since"]
        .map((c) => h("th", { scope: "col" }, c)))),
      tbody)));

  async function load() {
    try {
      const page = await get("/queue");
      const items = Array.isArray(page) ? page : (page.items || []);
      replace(errorBox);
      replace(tbody, items.map((e, i) => {
        const mine = ctx.me && (ctx.me.is_admin || e.user === ctx.me.user_id);
        return h("tr", { "data-task-id": e.task_id || "" },
          h("td", { class: "num" }, String(e.position ?? i + 1)),
          h("td", { class: "mono" }, mine && e.task_id
            ? h("a", { href: `#/tasks/${encodeURIComponent(e.task_id)}` }, e.task_id)
            : (e.task_id || h("span", { class: "muted" }, "(another user's task)"))),
          h("td", {}, e.user || h("span", { class: "muted" }, "—")),
          h("td", { class: "num" }, e.priority ?? ""),
          h("td", {}, fmtDemand(e.demand)),
          h("td", {}, stateBadge(e.state)),
          h("td", {}, e.wait_reason ? h("strong", {}, e.wait_reason) : h("span", { class: "muted" }, "not looked at yet"),
            e.wait_message ? h("div", { class: "reason" }, e.wait_message) : null),
          h("td", {}, timeEl(e.next_run_at)),
          h("td", {}, timeEl(e.waiting_since)));
      }));
      if (!items.length) tbody.append(h("tr", {}, h("td", { colspan: 9, class: "empty" }, "Nothing is waiting.")));
      status.textContent = items.length ? `${items.length} waiting` : "";
    } catch (err) {
      replace(errorBox, notice("error", errorText(err)));
    }
  }
  const reload = debounce(load, 300);
  const off = onEvent((rec) => { if (taskIdOf(rec) || rec.stream === "cluster") reload(); });
  const timer = setInterval(load, 15000);
  await load();
  return () => { off(); clearInterval(timer); };
}

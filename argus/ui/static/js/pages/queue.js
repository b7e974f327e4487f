// Queue: the tasks waiting for resources, in the order the scheduler looks at them, each
// with the reason it waits (other users' entries come anonymised from the API); below it,
// each user's share and recent GPU use as fair share weighs them (yours; every user's for
// an admin).

import { get, errorText } from "../api.js";
import { onEvent, taskIdOf } from "../events.js";
import {
  h, replace, stateBadge, fmtDemand, notice, debounce, fmtAge, fmtTime, nowS, clipped, startsIn,
} from "../dom.js";

export async function render(main, _params, ctx) {
  ctx.setTitle("Queue");
  const tbody = h("tbody");
  const status = h("p", { class: "muted", role: "status", "aria-live": "polite" });
  const errorBox = h("div");
  const sharesBody = h("tbody");
  const sharesNote = h("p", { class: "help" });
  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "Queue")),
    h("p", { class: "help" }, "Tasks waiting for their whole GPU gang, first in line at the top. ",
      "A task starts only when every node it needs has enough free GPUs at the same time."),
    errorBox, status,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "queue-table" },
      h("caption", { class: "visually-hidden" }, "Waiting tasks in order"),
      h("thead", {}, h("tr", {},
        h("th", { scope: "col", class: "num", title: "Position in line" }, "#"),
        h("th", { scope: "col" }, "Task"),
        h("th", { scope: "col", class: "col-user" }, "User"),
        h("th", { scope: "col", class: "num", title: "GPUs the whole gang needs at once" }, "GPUs"),
        h("th", { scope: "col", title: "How long it has waited" }, "Waiting"),
        h("th", { scope: "col", class: "col-why" }, "Why it waits"),
        h("th", { scope: "col", class: "col-state" }, "State"),
        h("th", { scope: "col", class: "num col-priority" }, "Priority"),
        h("th", { scope: "col", class: "col-next", title: "When the scheduler looks at it again" }, "Next try"),
        h("th", { scope: "col", class: "col-starts", title: "When it starts: 80 % sure, else ~expected" }, "Starts"))),
      tbody)),
    h("h2", {}, "Shares"), sharesNote,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "shares-table" },
      h("caption", { class: "visually-hidden" }, "Each user's share and recent GPU use"),
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "User"),
        h("th", { scope: "col", class: "num", title: "Relative to the other users' shares" }, "Share"),
        h("th", { scope: "col", class: "num", title: "GPUs guaranteed" }, "Quota"),
        h("th", { scope: "col", class: "num", title: "The cluster's GPUs split by the shares of users with work" }, "Fair GPUs"),
        h("th", { scope: "col", class: "num" }, "Holds"),
        h("th", { scope: "col", class: "num" }, "Running"),
        h("th", { scope: "col", class: "num" }, "Waiting"),
        h("th", { scope: "col", class: "num", title: "GPU-hours, each counting half after every half-life" }, "Recent GPU-h"))),
      sharesBody)));

  async function loadShares() {
    const d = await get("/shares");
    const days = d.half_life_s / 86400;
    sharesNote.textContent = `Policy ${d.policy}. Under fairshare, the user with the least recent GPU use ` +
      `per share goes first; usage counts half after ${+days.toFixed(2)} day(s).`;
    replace(sharesBody, (d.users || []).map((u) => h("tr", { "data-user": u.user },
      h("td", {}, u.user),
      h("td", { class: "num" }, String(u.share)),
      h("td", { class: "num" }, u.quota_gpus ? String(u.quota_gpus) : "—"),
      h("td", { class: "num" }, u.fair_gpus.toFixed(1)),
      h("td", { class: "num" }, String(u.held_gpus)),
      h("td", { class: "num" }, String(u.running_tasks)),
      h("td", { class: "num" }, String(u.waiting_tasks)),
      h("td", { class: "num" }, u.usage_gpu_hours.toFixed(1)))));
    if (!(d.users || []).length) sharesBody.append(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No work and no recent use.")));
  }

  async function load() {
    try {
      const page = await get("/queue");
      const items = Array.isArray(page) ? page : (page.items || []);
      replace(errorBox);
      replace(tbody, items.map((e, i) => {
        const mine = ctx.me && (ctx.me.is_admin || e.user === ctx.me.user_id);
        const now = nowS();
        return h("tr", { "data-task-id": e.task_id || "" },
          h("td", { class: "num" }, String(e.position ?? i + 1)),
          h("td", { class: "col-task" }, mine && e.task_id
            ? h("a", { href: `#/tasks/${encodeURIComponent(e.task_id)}`, class: "mono task-id" }, e.task_id)
            : (e.task_id ? h("span", { class: "mono task-id" }, e.task_id)
              : h("span", { class: "muted" }, "(another user's task)"))),
          h("td", { class: "col-user" }, e.user || h("span", { class: "muted" }, "—")),
          h("td", { class: "num" }, gpus(e.demand)),
          h("td", {}, e.waiting_since
            ? h("span", { title: `since ${fmtTime(e.waiting_since)}` }, fmtAge(now - e.waiting_since))
            : h("span", { class: "muted" }, "—")),
          h("td", { class: "col-why" },
            e.wait_reason ? h("strong", {}, e.wait_reason) : h("span", { class: "muted" }, "not looked at yet"),
            e.wait_message ? clipped(e.wait_message, 200, { class: "reason" }) : null),
          h("td", { class: "col-state" }, stateBadge(e.state)),
          h("td", { class: "num col-priority" }, e.priority ?? ""),
          h("td", { class: "col-next" }, nextTry(e.next_run_at, now)),
          h("td", { class: "col-starts" }, startsIn(e, now)));
      }));
      if (!items.length) tbody.append(h("tr", {}, h("td", { colspan: 10, class: "empty" }, "Nothing is waiting.")));
      status.textContent = items.length ? `${items.length} waiting` : "";
      await loadShares();
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

/** "8" for a 2 × 4 gang, the shape beside it when it spans nodes. */
function gpus(d) {
  if (!d) return "";
  const total = (d.nnodes || 0) * (d.n_gpus_per_node || 0);
  return h("span", { title: fmtDemand(d) }, String(total),
    d.nnodes > 1 ? h("span", { class: "muted gang" }, ` (${d.nnodes} × ${d.n_gpus_per_node})`) : null);
}

function nextTry(ts, now) {
  if (!ts) return h("span", { class: "muted" }, "—");
  return h("span", { title: fmtTime(ts) }, ts <= now ? "now" : `in ${fmtAge(ts - now)}`);
}

// Goodput: the GPU time tasks held and where it went (docs/runs.md, "Goodput"). The task
// page shows one task's (GET /tasks/{id} → goodput), the cluster page each user's and the
// cluster's (GET /goodput). Numbers are GPU-seconds; waiting is wall time.

import { h, fmtAge } from "./dom.js";

// The parts of "held", in the order the API's CATEGORIES names them, with what they mean.
export const CATEGORIES = [
  ["productive", "Productive", "between the first and the last step of each attempt, less work trained again"],
  ["placement", "Placement", "admitted until Ray reported it running"],
  ["startup", "Start-up", "running until its first step"],
  ["stalled", "Stalled", "last step until the stall watchdog's stop"],
  ["lost", "Lost to restarts", "steps after the last checkpoint, trained again after a restart or preemption"],
  ["failed", "Failed", "attempts that ended the task as FAILED"],
  ["other", "Other", "last step until the end: final save, shutdown, a preemption's grace, the step in progress"],
];

/** GPU-seconds as GPU-s under an hour, else GPU-h (as `argus show`). */
export function fmtGpuTime(s) {
  const v = Number(s) || 0;
  return v < 3600 ? `${Math.round(v)} GPU-s` : `${(v / 3600).toFixed(1)} GPU-h`;
}

function pct(part, whole) {
  return whole > 0 ? `${Math.round((100 * part) / whole)} %` : "—";
}

/** One breakdown: a headline, a stacked bar and a table of the parts. */
export function goodputBreakdown(g) {
  if (!g || !(g.held > 0)) {
    return h("p", { class: "muted" }, "No GPU time held yet", g ? `; waited ${fmtAge(g.waiting_s)}.` : ".");
  }
  const parts = CATEGORIES.filter(([key]) => g[key] > 0);
  // An SVG bar, its parts' widths as attributes: the page's CSP allows no style attribute.
  let x = 0;
  const rects = parts.map(([key, name]) => {
    const width = (1000 * g[key]) / g.held;
    const rect = h("rect", { class: `goodput-part goodput-${key}`, x, y: 0, width, height: 10 },
      h("title", {}, `${name}: ${fmtGpuTime(g[key])}`));
    x += width;
    return rect;
  });
  return h("div", { class: "goodput" },
    h("p", { class: "goodput-head" },
      h("strong", {}, pct(g.productive, g.held)), ` productive: ${fmtGpuTime(g.productive)} of `,
      `${fmtGpuTime(g.held)} held; waited ${fmtAge(g.waiting_s)}`,
      g.lost_steps ? `; ${g.lost_steps} step(s) trained again` : ""),
    h("svg", { class: "goodput-bar", viewBox: "0 0 1000 10", preserveAspectRatio: "none", role: "img",
      "aria-label": parts.map(([k, n]) => `${n} ${pct(g[k], g.held)}`).join(", ") }, rects),
    h("table", { class: "data goodput-table" },
      h("thead", {}, h("tr", {}, ["Where it went", "GPU time", "Share"].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, CATEGORIES.map(([key, name, what]) => h("tr", { "data-category": key },
        h("th", { scope: "row", title: what }, h("span", { class: `goodput-key goodput-${key}` }), name),
        h("td", { class: "num" }, fmtGpuTime(g[key])),
        h("td", { class: "num" }, pct(g[key], g.held)))))));
}

/** Per user and the cluster: one row each (GET /goodput). */
export function goodputByUser(report) {
  const rows = [...(report.users || []), { ...report.cluster, user: "all users" }];
  const hours = (s) => ((Number(s) || 0) / 3600).toFixed(2);
  return h("div", { class: "table-wrap" }, h("table", { class: "data", id: "goodput-table" },
    h("caption", { class: "visually-hidden" }, "GPU-hours held per user and where they went"),
    h("thead", {}, h("tr", {}, ["User", "Tasks", "Held (GPU-h)", "Goodput", ...CATEGORIES.map(([, n]) => n), "Waited"]
      .map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, rows.map((r) => h("tr", { "data-user": r.user, class: r.user === "all users" ? "total" : null },
      h("td", {}, r.user),
      h("td", { class: "num" }, String(r.tasks)),
      h("td", { class: "num" }, hours(r.goodput.held)),
      h("td", { class: "num" }, pct(r.goodput.productive, r.goodput.held)),
      CATEGORIES.map(([key]) => h("td", { class: "num" }, hours(r.goodput[key]))),
      h("td", { class: "num" }, fmtAge(r.goodput.waiting_s)))))));
}

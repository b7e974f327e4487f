// Usage: GPU-hours per day as stacked bars (one colour per team or user), and the table of
// GET /api/v2/usage: GPU-hours by GPU model, wait hours and goodput. A user sees their own
// rows (by team: their team's); an admin everyone's. Plain SVG: nothing fetched from elsewhere.

import { get, query, errorText } from "../api.js";
import { h, replace, notice } from "../dom.js";

const W = 720;
const H = 240;
const PAD = { left: 48, right: 12, top: 12, bottom: 40 };
const COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];

function barChart(report) {
  const days = [...new Set(report.rows.map((r) => r.day))].sort();
  const keys = [...new Set(report.rows.map((r) => r.key))].sort();
  const svg = h("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", id: "usage-chart", role: "img",
    "aria-label": `GPU-hours per day by ${report.by}: ${days.length} day(s), ${keys.length} ${report.by}(s)` });
  if (!days.length) {
    svg.append(h("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, "no usage in this window"));
    return h("figure", { class: "chart-figure" }, svg);
  }
  const totals = days.map((d) => report.rows.filter((r) => r.day === d).reduce((s, r) => s + r.gpu_hours, 0));
  const top = Math.max(...totals, 1e-9);
  const slot = (W - PAD.left - PAD.right) / days.length;
  const scale = (v) => (v / top) * (H - PAD.top - PAD.bottom);
  svg.append(h("line", { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom, class: "chart-axes", stroke: "currentColor" }));
  svg.append(h("text", { x: PAD.left - 6, y: PAD.top + 10, "text-anchor": "end", class: "chart-tick" }, top.toFixed(1)));
  days.forEach((day, i) => {
    let y = H - PAD.bottom;
    keys.forEach((key, k) => {
      const row = report.rows.find((r) => r.day === day && r.key === key);
      if (!row || row.gpu_hours <= 0) return;
      const height = scale(row.gpu_hours);
      y -= height;
      svg.append(h("rect", { x: PAD.left + i * slot + slot * 0.15, y, width: slot * 0.7, height,
        fill: COLOURS[k % COLOURS.length], class: "usage-bar", "data-key": key, "data-day": day },
      h("title", {}, `${key} on ${day}: ${row.gpu_hours.toFixed(2)} GPU-h`)));
    });
    svg.append(h("text", { x: PAD.left + (i + 0.5) * slot, y: H - PAD.bottom + 16, "text-anchor": "middle", class: "chart-tick" }, day.slice(5)));
  });
  const legend = h("ul", { class: "legend plain" }, keys.map((key, k) => h("li", {},
    h("svg", { width: 12, height: 12, "aria-hidden": "true" }, h("rect", { width: 12, height: 12, fill: COLOURS[k % COLOURS.length] })),
    ` ${key}`)));
  return h("figure", { class: "chart-figure" }, svg, h("figcaption", {}, "GPU-hours per day (UTC)"), legend);
}

function table(report) {
  const models = report.gpu_models;
  const fmt = (v) => (v === null || v === undefined ? "-" : v.toFixed(2));
  return h("div", { class: "table-wrap" }, h("table", { class: "data", id: "usage-table" },
    h("thead", {}, h("tr", {}, ["Day", report.by === "team" ? "Team" : "User", "GPU-h", ...models.map((m) => `GPU-h ${m}`),
      "Tasks finished", "Held GPU-h", "Productive GPU-h", "Goodput", "Wait h"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, report.rows.map((r) => h("tr", { "data-key": r.key, "data-day": r.day },
      h("td", {}, r.day), h("td", { class: "mono" }, r.key), h("td", {}, fmt(r.gpu_hours)),
      ...models.map((m) => h("td", {}, fmt(r.gpu_hours_by_model[m] || 0))),
      h("td", {}, String(r.tasks_finished)), h("td", {}, fmt(r.held_gpu_hours)), h("td", {}, fmt(r.productive_gpu_hours)),
      h("td", {}, r.goodput === null ? "-" : `${Math.round(100 * r.goodput)} %`), h("td", {}, fmt(r.wait_hours)))))));
}

export async function render(main, params, ctx) {
  ctx.setTitle("Usage");
  const q = params.q || {};
  const by = q.by === "team" ? "team" : "user";
  const since = /^\d{4}-\d{2}-\d{2}$/.test(q.since || "") ? q.since : "";
  const body = h("div", { id: "usage-body", "aria-live": "polite" }, "Loading…");
  const bySelect = h("select", { id: "usage-by", name: "by" },
    ["user", "team"].map((v) => h("option", { value: v, ...(v === by ? { selected: true } : {}) }, `by ${v}`)));
  const sinceInput = h("input", { id: "usage-since", name: "since", type: "date", value: since });
  const form = h("form", { class: "inline-form", id: "usage-form" },
    h("div", { class: "field" }, h("label", { for: "usage-by" }, "Group"), bySelect),
    h("div", { class: "field" }, h("label", { for: "usage-since" }, "Since"), sinceInput),
    h("button", { type: "submit", class: "btn" }, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams({ by: bySelect.value, ...(sinceInput.value ? { since: sinceInput.value } : {}) });
    ctx.navigate(`#/usage?${p}`);
  });
  replace(main, h("div", { class: "page-head" }, h("h1", {}, "Usage")), form, body);
  try {
    const report = await get(`/usage${query({ by, ...(since ? { since } : {}) })}`);
    replace(body, barChart(report), table(report));
  } catch (err) {
    replace(body, notice("error", errorText(err)));
  }
}

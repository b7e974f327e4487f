// A small line chart as inline SVG (no library): one metric over training steps.

import { h } from "./dom.js";

const W = 640;
const H = 220;
const PAD = { left: 56, right: 16, top: 16, bottom: 36 };

function niceNumber(v) {
  if (!Number.isFinite(v)) return "";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

/**
 * lineChart([{x, y}], {label, xLabel}) -> <figure> with an SVG line and axis ticks.
 * Points with non-finite y are dropped.
 */
export function lineChart(points, { label = "", xLabel = "step" } = {}) {
  const pts = points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)).sort((a, b) => a.x - b.x);
  const svg = h("svg", {
    viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-label": pts.length ? `${label} over ${xLabel}s: ${pts.length} points, last ${niceNumber(pts[pts.length - 1].y)} at ${xLabel} ${pts[pts.length - 1].x}` : `${label}: no data yet`,
  });
  if (pts.length === 0) {
    svg.append(h("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, "no data yet"));
    return h("figure", { class: "chart-figure" }, svg);
  }
  let [x0, x1] = [pts[0].x, pts[pts.length - 1].x];
  let y0 = Math.min(...pts.map((p) => p.y));
  let y1 = Math.max(...pts.map((p) => p.y));
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const px = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const py = (y) => H - PAD.bottom - ((y - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);

  const axes = h("g", { class: "chart-axes" },
    h("line", { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom }),
    h("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom }));
  const ticks = h("g", { class: "chart-ticks" });
  for (let i = 0; i <= 4; i += 1) {
    const yv = y0 + ((y1 - y0) * i) / 4;
    const y = py(yv);
    ticks.append(h("line", { x1: PAD.left, y1: y, x2: W - PAD.right, y2: y, class: "grid" }));
    ticks.append(h("text", { x: PAD.left - 6, y: y + 4, "text-anchor": "end" }, niceNumber(yv)));
  }
  const xs = [...new Set([x0, (x0 + x1) / 2, x1].map((v) => Math.round(v)))];
  for (const xv of xs) {
    ticks.append(h("text", { x: px(xv), y: H - PAD.bottom + 16, "text-anchor": "middle" }, String(xv)));
  }
  ticks.append(h("text", { x: (PAD.left + W - PAD.right) / 2, y: H - 4, "text-anchor": "middle", class: "axis-label" }, xLabel));

  const line = h("polyline", {
    class: "chart-line", fill: "none",
    points: pts.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(" "),
  });
  const dots = h("g", { class: "chart-dots" },
    (pts.length <= 60 ? pts : [pts[pts.length - 1]]).map((p) =>
      h("circle", { cx: px(p.x).toFixed(1), cy: py(p.y).toFixed(1), r: 2.5 },
        h("title", {}, `${xLabel} ${p.x}: ${niceNumber(p.y)}`))));
  svg.append(axes, ticks, line, dots);
  return h("figure", { class: "chart-figure" }, svg, h("figcaption", {}, label));
}

// Which metric to show first, by preference (verl names first).
const PREFERRED = [
  "critic/score/mean", "critic/rewards/mean", "reward", "score", "train/loss", "loss",
  "val/test_score", "actor/pg_loss",
];

export function mainMetric(names) {
  for (const p of PREFERRED) if (names.includes(p)) return p;
  return names[0] || null;
}

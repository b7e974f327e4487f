// Tiny DOM helpers. Every piece of text goes in through text nodes (never parsed as HTML),
// so server data can never become markup.

/**
 * h("a", {href: "#/x", class: "btn", onclick: fn}, "text", child, [more])
 * Attributes: class, for, data-*, aria-*, boolean flags (true sets "", false/null omits),
 * on<event> functions become listeners. Children: strings/numbers become text nodes,
 * null/undefined/false are skipped, arrays are flattened.
 */
export function h(tag, attrs = {}, ...children) {
  const el = tag === "svg" || SVG_TAGS.has(tag)
    ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "value" && "value" in el && !(el instanceof SVGElement)) {
      el.value = value;
    } else if (key === "checked" || key === "selected") {
      el[key] = Boolean(value);
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

const SVG_TAGS = new Set(["path", "polyline", "line", "circle", "text", "g", "rect", "title"]);

export function append(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace all children of el. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** "2026-11-21 09:05:59" in the browser's local time; "" for null. */
export function fmtTime(ts) {
  if (ts === null || ts === undefined || ts === "") return "";
  const d = typeof ts === "number" ? new Date(ts * 1000) : new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ` +
    `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A <time> element with the full timestamp as its machine-readable value. */
export function timeEl(ts) {
  if (ts === null || ts === undefined || ts === "") return h("span", { class: "muted" }, "—");
  const d = typeof ts === "number" ? new Date(ts * 1000) : new Date(ts);
  return h("time", { datetime: Number.isNaN(d.getTime()) ? null : d.toISOString() }, fmtTime(ts));
}

/** A duration the way people say it (as the CLI's fmt_age): 45s, 12m, 3h05m, 2d4h. */
export function fmtAge(seconds) {
  const s = Math.max(0, Math.floor(Number(seconds) || 0));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${Math.floor((s % 86400) / 3600)}h`;
}

/** A waiting task's start, from now: its 80 % interval ("in 20m–1h30m"; "in 2h05m or
 * later" with no upper end known), its times in the title; until the intervals have
 * learned (a fresh stack), its expected start as the task page gives it ("~in 25m", "any
 * moment" once due; as the CLI's fmt_starts_in); a dash without either. */
export function startsIn(d, now) {
  const lo = d.start_earliest, hi = d.start_latest;
  if (lo === null || lo === undefined) {
    const at = d.expected_start;
    if (!at) return h("span", { class: "muted" }, "—");
    const title = `expected ~${fmtTime(at)} (if nothing else arrives ahead of it)`;
    return h("span", { class: "starts-in", title }, at > now ? `~in ${fmtAge(at - now)}` : "any moment");
  }
  const low = lo <= now ? "now" : fmtAge(lo - now);
  const text = hi === null || hi === undefined ? `in ${low} or later`
    : hi <= now ? "now" : `in ${low}–${fmtAge(hi - now)}`;
  const title = `80 % sure it starts between ${fmtTime(lo)} and ${hi ? fmtTime(hi) : "an unknown time"}` +
    (d.expected_start ? `; expected ~${fmtTime(d.expected_start)}` : "") + " (if nothing else arrives ahead of it)";
  return h("span", { class: "starts-in", title }, text);
}

/** Now, in the API's unit (seconds since the epoch). */
export function nowS() { return Date.now() / 1000; }

/** Text cut to `max` characters, "…" where it was cut. */
export function clip(text, max = 120) {
  const s = String(text ?? "");
  return s.length > max ? `${s.slice(0, max - 1).trimEnd()}…` : s;
}

/** A <span> of clip(text), the whole text in its title (shown on hover). */
export function clipped(text, max = 120, attrs = {}) {
  const s = String(text ?? "");
  return h("span", { ...attrs, title: s || null }, clip(s, max));
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

// The server's states, learned at start (vocabulary.js).
export { STATES, TERMINAL, WAITING } from "./vocabulary.js";

export function stateBadge(state) {
  const s = String(state || "UNKNOWN");
  return h("span", { class: `badge state-${s.toLowerCase()}`, "data-state": s }, s);
}

/** "2 × 4 GPU" (or "2 × 4 H100 GPU") from a demand object (nnodes, n_gpus_per_node[,
 * cpus_per_node, gpu_types]). */
export function fmtDemand(d, driverCpus = 0) {
  if (!d) return "";
  const model = d.gpu_types && d.gpu_types.length ? `${d.gpu_types.join(" or ")} ` : "";
  const base = `${d.nnodes} × ${d.n_gpus_per_node} ${model}GPU`;
  if (!d.cpus_per_node) return base;
  // Counted as the scheduler, its wait reasons and the cluster page count them: with the
  // job driver's CPUs (the task detail says how many: driver_cpus).
  if (driverCpus) return `${base}, ${+(d.cpus_per_node + driverCpus).toFixed(2)} CPU/node (${d.cpus_per_node} + ${driverCpus} for its driver)`;
  return `${base}, ${d.cpus_per_node} CPU/node`;
}

/** A <dl> from [label, value] pairs; values may be nodes or text; empty ones are skipped. */
export function dl(pairs, cls = "facts") {
  const out = h("dl", { class: cls });
  for (const [label, value] of pairs) {
    if (value === null || value === undefined || value === "") continue;
    append(out, [h("dt", {}, label), h("dd", {}, value)]);
  }
  return out;
}

/** A status / error message box; kind is "error", "warning", "ok" or "info". */
export function notice(kind, ...children) {
  return h("div", { class: `notice notice-${kind}`, role: kind === "error" ? "alert" : "status" },
    ...children);
}

/** Call fn at most once per `ms`, with the latest arguments (trailing edge). */
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

export function pretty(value) {
  try { return JSON.stringify(value, null, 2); } catch { return String(value); }
}

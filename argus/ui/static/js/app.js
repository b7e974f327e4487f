// The shell: session check, navigation, hash routing (#/tasks, #/tasks/<id>, ...).
// Each page module exports render(main, params, ctx) and may return a cleanup function.

import { get, post, onUnauthorized } from "./api.js";
import { startEvents, stopEvents, onStatus } from "./events.js";
import { h, replace } from "./dom.js";
import { loadVocabulary } from "./vocabulary.js";

const PAGES = {
  login: () => import("./pages/login.js"),
  tasks: () => import("./pages/tasks.js"),
  task: () => import("./pages/task_detail.js"),
  new: () => import("./pages/new_task.js"),
  queue: () => import("./pages/queue.js"),
  cluster: () => import("./pages/cluster.js"),
  data: () => import("./pages/data.js"),
  users: () => import("./pages/users.js"),
  sftp: () => import("./pages/sftp.js"),
  teams: () => import("./pages/teams.js"),
  usage: () => import("./pages/usage.js"),
  notfound: () => import("./pages/not_found.js"),
};

const ctx = {
  me: null,
  navigate(hash) { if (location.hash === hash) route(); else location.hash = hash; },
  setTitle(text) { document.title = text ? `${text} · Argus` : "Argus"; },
  async afterLogin(me) {
    ctx.me = me;
    showSession();
    startEvents();
    const next = sessionStorage.getItem("argus.next");
    sessionStorage.removeItem("argus.next");
    ctx.navigate(next && next !== "#/login" ? next : "#/tasks");
  },
};

let cleanup = null;
let renderSeq = 0;

/** "#/tasks/abc?state=RUNNING" -> {name, params} */
export function parseHash(hash) {
  const raw = (hash || "").replace(/^#/, "") || "/tasks";
  const [pathPart, queryPart = ""] = raw.split("?");
  const parts = pathPart.split("/").filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  const q = Object.fromEntries(new URLSearchParams(queryPart));
  const [first, ...rest] = parts;
  if (!first || first === "tasks") {
    if (rest.length === 0) return { name: "tasks", params: { q } };
    if (rest.length === 1 && rest[0] === "new") return { name: "new", params: { q } };
    if (rest.length === 1) return { name: "task", params: { id: rest[0], q } };
    return { name: "notfound", params: { q } };
  }
  if (first === "data") return { name: "data", params: { area: rest.join("/"), q } };
  if (["login", "queue", "cluster", "users", "sftp", "teams", "usage"].includes(first) && rest.length === 0) {
    return { name: first, params: { q } };
  }
  return { name: "notfound", params: { q } };
}

function showSession() {
  const me = ctx.me;
  document.getElementById("nav").hidden = !me;
  document.getElementById("session").hidden = !me;
  document.querySelectorAll("[data-admin-only]").forEach((el) => { el.hidden = !(me && me.is_admin); });
  const who = document.getElementById("whoami");
  if (me) {
    replace(who, h("span", { class: "user-name" }, me.display_name || me.user_id),
      me.is_admin ? h("span", { class: "tag" }, "admin") : null);
  }
}

function markNav(name) {
  document.querySelectorAll("#nav a[data-route]").forEach((a) => {
    const active = a.dataset.route === name || (name === "task" && a.dataset.route === "tasks");
    if (active) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  });
}

async function route() {
  const seq = ++renderSeq;
  let { name, params } = parseHash(location.hash);
  if (!ctx.me && name !== "login") {
    sessionStorage.setItem("argus.next", location.hash || "#/tasks");
    name = "login";
  }
  if (ctx.me && name === "login") name = "tasks";
  if ((name === "users" || name === "teams") && !(ctx.me && ctx.me.is_admin)) name = "notfound";
  if (cleanup) { try { cleanup(); } catch (err) { console.error(err); } cleanup = null; }
  markNav(name);
  const main = document.getElementById("main");
  main.setAttribute("aria-busy", "true");
  main.dataset.page = name;
  // Each navigation renders into a view of its own. A page still rendering when the user
  // moves on (awaiting the API) then draws into its view, detached by then, never over the
  // next page: a task's page finishing late once replaced the Tasks list just opened.
  const view = h("div", { class: "view" });
  replace(main, view);
  try {
    const mod = await PAGES[name]();
    if (seq !== renderSeq) return; // a newer navigation started
    const result = await mod.render(view, params, ctx);
    if (seq !== renderSeq) { if (typeof result === "function") result(); return; }
    cleanup = typeof result === "function" ? result : null;
  } catch (err) {
    if (seq !== renderSeq) return;
    console.error(err);
    replace(view, h("h1", {}, "Something went wrong"),
      h("p", { class: "notice notice-error", role: "alert" }, String(err && err.message ? err.message : err)));
  } finally {
    if (seq === renderSeq) main.removeAttribute("aria-busy");
  }
  if (seq === renderSeq && document.activeElement === document.body) main.focus({ preventScroll: true });
}

async function logout() {
  try { await post("/auth/logout", {}, { noAuthRedirect: true }); } catch { /* gone anyway */ }
  ctx.me = null;
  stopEvents();
  showSession();
  ctx.navigate("#/login");
}

function liveIndicator() {
  const el = document.getElementById("live-status");
  const text = { live: "● live", connecting: "○ connecting", reconnecting: "○ reconnecting", off: "" };
  onStatus((s) => {
    el.textContent = text[s] ?? s;
    el.dataset.status = s;
    el.title = s === "live" ? "Receiving updates as they happen" : "";
  });
}

async function boot() {
  await loadVocabulary();  // states and event types, before any page or stream uses them
  liveIndicator();
  document.getElementById("logout").addEventListener("click", logout);
  onUnauthorized(() => {
    if (!ctx.me) return;
    ctx.me = null;
    stopEvents();
    showSession();
    if (parseHash(location.hash).name !== "login") {
      sessionStorage.setItem("argus.next", location.hash || "#/tasks");
      ctx.navigate("#/login");
    }
  });
  try {
    ctx.me = await get("/me", { noAuthRedirect: true });
  } catch {
    ctx.me = null;
  }
  showSession();
  if (ctx.me) startEvents();
  window.addEventListener("hashchange", route);
  await route();
}

/** The server's task event types the timeline cannot describe (for tests; [] when none). */
window.argusUnhandledEventTypes = async () => {
  await loadVocabulary();
  return (await import("./pages/task_detail.js")).undescribed();
};

boot();

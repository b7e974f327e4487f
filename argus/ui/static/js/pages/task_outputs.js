// The task page's Outputs: for each attempt, its job folder (browse it on the Data page),
// downloads of driver.log and the metrics files, where it is on disk, and the attempt's
// job in the Ray dashboard when the API knows the dashboard's address (GET /cluster).

import { get, encodePath, API } from "../api.js";
import { h, replace, notice } from "../dom.js";
import { paths } from "./data.js";

/** The Ray dashboard's base URL from the discovery record, or null when none is known. */
async function dashboardUrl() {
  try {
    const c = await get("/cluster");
    const url = c && c.head && c.head.job_server_url;
    return typeof url === "string" && /^https?:\/\//.test(url) ? url.replace(/\/+$/, "") : null;
  } catch {
    return null;
  }
}

/** Top-level files of an attempt's folder worth a direct link (null: cannot list it). */
async function notableFiles(sid) {
  try {
    const listing = await get(`/files/jobs/${encodePath(sid)}`);
    return (listing.entries || []).filter((e) => e.type === "file" || (!e.type && !e.is_dir));
  } catch {
    return null;
  }
}

const fileUrl = (sid, name) => `${API}/files/jobs/${encodePath(sid)}/${encodePath(name)}`;
const LINKED = (name) => name === "driver.log" || name === "result.json" || name.endsWith(".jsonl");

/** {section, draw(task)}: the Outputs card; draw() is cheap when nothing changed. */
export function outputsPanel(ctx) {
  const body = h("div");
  const section = h("section", { id: "outputs", class: "card", "aria-labelledby": "outputs-h" },
    h("h2", { id: "outputs-h" }, "Outputs"), body);
  const dashboard = dashboardUrl();
  let drawn = "";
  let seq = 0;

  async function draw(task) {
    const attempts = task.attempts || [];
    const key = `${task.state}|${attempts.map((a) => `${a.submission_id}:${a.ray_status}`).join(",")}`;
    if (key === drawn) return;
    drawn = key;
    const mine = ++seq;
    if (attempts.length === 0) {
      replace(body, h("p", { class: "muted" }, "Outputs appear here once the task has started."));
      return;
    }
    const own = ctx.me && ctx.me.user_id === task.user;
    const p = paths(ctx.me);
    const home = own ? p.home : `${p.shared}/users/${task.user}`;
    const ray = await dashboard;
    const files = own ? await Promise.all(attempts.map((a) => notableFiles(a.submission_id))) : [];
    if (mine !== seq) return; // a newer draw started
    const rows = [...attempts].reverse().map((a) => {
      const i = attempts.indexOf(a);
      const sid = a.submission_id;
      const listed = files[i];
      const links = [];
      if (own) {
        links.push(h("a", { href: `#/data/jobs/${encodePath(sid)}`, class: "btn btn-small", "data-output": "browse" }, "Browse files"));
        const names = listed ? listed.map((e) => e.name).filter(LINKED) : ["driver.log"];
        for (const name of names.sort()) {
          links.push(h("a", {
            href: fileUrl(sid, name), download: name, class: "btn btn-small",
            "data-output": name.endsWith(".jsonl") ? "metrics" : name,
            "aria-label": `Download ${name} of attempt ${a.attempt_no}`,
          }, name));
        }
      }
      if (ray) {
        links.push(h("a", {
          href: `${ray}/#/jobs/${encodeURIComponent(sid)}`, target: "_blank", rel: "noopener noreferrer",
          class: "btn btn-small", "data-output": "ray",
        }, "Ray job ↗"));
      }
      return h("tr", { "data-submission-id": sid },
        h("td", { class: "num" }, `#${a.attempt_no}`),
        h("td", {}, h("code", { class: "mono" }, `${home}/jobs/${sid}/`)),
        h("td", { class: "row-actions" }, links));
    });
    replace(body,
      own ? null : notice("info", `These are ${task.user}'s files: only ${task.user} can browse them on the Data page. The log is shown below.`),
      h("div", { class: "table-wrap" }, h("table", { class: "data", id: "outputs-table" },
        h("caption", { class: "visually-hidden" }, "Each attempt's output folder"),
        h("thead", {}, h("tr", {}, ["Attempt", "Folder on disk", h("span", { class: "visually-hidden" }, "Links")]
          .map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows))),
      h("p", { class: "help" }, "In a spec this folder is ", h("code", {}, "${ARGUS_JOB_DIR}"),
        "; checkpoints and metrics written there stay after the task ends."));
  }

  return { section, draw };
}

// Cluster: worker nodes with free/total GPUs and CPUs, the head (from its discovery
// record), when Argus last looked, and goodput per user and for the cluster.

import { get, errorText } from "../api.js";
import { onEvent } from "../events.js";
import { h, replace, timeEl, dl, notice, debounce, pretty } from "../dom.js";
import { goodputBreakdown, goodputByUser } from "../goodput.js";

function fmtNum(v) {
  if (v === null || v === undefined) return "?";
  return Number.isInteger(v) ? String(v) : Number(v).toFixed(1);
}

function usage(free, total, label) {
  const used = Math.max(0, (total || 0) - (free || 0));
  return h("div", { class: "usage" },
    h("meter", { min: 0, max: total || 1, value: used, "aria-label": `${label} in use` }),
    h("span", {}, `${fmtNum(free)} free / ${fmtNum(total)}`));
}

export async function render(main, _params, ctx) {
  ctx.setTitle("Cluster");
  const summary = h("div");
  const head = h("section", { class: "card", id: "head-node", "aria-labelledby": "head-h" });
  const tbody = h("tbody");
  const errorBox = h("div");
  const goodput = h("section", { class: "card", id: "goodput", "aria-labelledby": "goodput-h" });
  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "Cluster")),
    errorBox, summary,
    h("section", { "aria-labelledby": "nodes-h" },
      h("h2", { id: "nodes-h" }, "Nodes"),
      h("div", { class: "table-wrap" }, h("table", { class: "data", id: "nodes-table" },
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Node"),
          h("th", { scope: "col" }, "IP"),
          h("th", { scope: "col", class: "col-role" }, "Role"),
          h("th", { scope: "col" }, "GPUs"),
          h("th", { scope: "col" }, "CPUs"),
          h("th", { scope: "col", title: "GPUs and CPUs of the gangs Argus admitted here, held until Ray gives them back" }, "Committed"),
          h("th", { scope: "col", class: "col-seen" }, "Last seen"))),
        tbody))),
    goodput, head);

  async function loadGoodput() {
    try {
      const report = await get("/goodput");
      replace(goodput, h("h2", { id: "goodput-h" }, "Goodput"),
        h("p", { class: "help" }, "GPU time held by every task so far (running ones up to now), and where it went: ",
          h("strong", {}, "productive"), " is time between steps; the rest went to placement, start-up, stalls, ",
          "work trained again after restarts and preemptions, failures, and the ends of attempts. ",
          "You see your own row and the cluster's; an admin sees every user's."),
        goodputBreakdown(report.cluster.goodput), goodputByUser(report));
    } catch (err) {
      replace(goodput, h("h2", { id: "goodput-h" }, "Goodput"), notice("error", errorText(err)));
    }
  }

  async function load() {
    loadGoodput();
    let c;
    try {
      c = await get("/cluster");
      replace(errorBox);
    } catch (err) {
      replace(errorBox, notice("error", errorText(err)));
      return;
    }
    const nodes = c.nodes || [];
    const freeG = nodes.reduce((s, n) => s + (n.free_gpus || 0), 0);
    const ledger = Object.fromEntries((c.ledger || []).map((l) => [l.node_id, l]));
    const committedG = (c.ledger || []).reduce((s, l) => s + (l.committed_gpus || 0), 0);
    const admissibleG = (c.ledger || []).reduce((s, l) => s + (l.admissible_gpus || 0), 0);
    const totalG = nodes.reduce((s, n) => s + (n.total_gpus || 0), 0);
    const seen = Object.fromEntries((c.seen || []).map((x) => [x.node_id, x]));
    const lastCheck = (c.seen || []).reduce((m, x) => Math.max(m, x.checked_at || 0), 0);
    replace(summary,
      c.reachable === false
        ? notice("error", "Ray is not reachable", c.error ? `: ${c.error}` : ".")
        : null,
      dl([
        ["Worker nodes", String(nodes.filter((n) => !n.is_head).length)],
        ["GPUs free (Ray)", `${fmtNum(freeG)} of ${fmtNum(totalG)}`],
        ["GPUs committed", fmtNum(committedG)],
        ["GPUs admissible", fmtNum(admissibleG)],
        // Capacity is recorded when it changes; each node's watchdog reports every few
        // seconds while it lives: that is when it was last seen.
        ["Capacity changed", timeEl(c.observed_at)],
        ["Last check", lastCheck ? timeEl(lastCheck) : ""],
      ], "facts facts-row"));
    const headIp = c.head && (c.head.ip || c.head.node_ip || c.head.host);
    const holds = {};
    for (const x of c.holds || []) (holds[x.node_id] = holds[x.node_id] || []).push(x);
    const rows = nodes.map((n) => {
      const isHead = n.is_head || (headIp && n.ip === headIp && !n.total_gpus);
      return h("tr", { "data-node-id": n.node_id, class: isHead ? "is-head" : null },
        h("td", { class: "mono" }, seen[n.node_id] ? `${seen[n.node_id].hostname} ` : "",
          h("span", { class: "muted", title: n.node_id || "" }, String(n.node_id || "").slice(0, 8)),
          isHead ? h("span", { class: "tag tag-head" }, "head") : null),
        h("td", { class: "mono" }, n.ip || ""),
        h("td", { class: "col-role" }, isHead ? "head (runs no training)" : n.gpu_type ? `worker (${n.gpu_type})` : "worker",
          // Held: it admits no new attempt (drained by an admin, or quarantined with the
          // leftover processes as evidence); what runs there goes on.
          (holds[n.node_id] || []).map((x) => h("div", { class: "hold" },
            h("span", { class: `tag tag-${x.kind}` }, x.kind === "drain" ? "drained" : "quarantined"), ` ${x.reason}`))),
        h("td", {}, usage(n.free_gpus, n.total_gpus, "GPUs")),
        h("td", {}, usage(n.free_cpus, n.total_cpus, "CPUs")),
        h("td", { class: "col-committed" }, ledger[n.node_id]
          ? `${fmtNum(ledger[n.node_id].committed_gpus)} GPUs, ${fmtNum(ledger[n.node_id].committed_cpus)} CPUs`
          : "—"),
        h("td", { class: "col-seen", title: seen[n.node_id] ? "its watchdog's last report" : "the last change of capacity (no report from its watchdog)" },
          timeEl(seen[n.node_id]?.checked_at ?? n.last_seen ?? n.observed_at ?? c.observed_at)));
    });
    if (c.head && !nodes.some((n) => n.is_head)) {
      rows.unshift(h("tr", { class: "is-head" },
        h("td", { class: "mono" }, "head", h("span", { class: "tag tag-head" }, "head")),
        h("td", { class: "mono" }, headIp || c.head.address || ""),
        h("td", { class: "col-role" }, "head (runs no training)"),
        h("td", {}, "—"), h("td", {}, "—"), h("td", {}, "—"),
        h("td", { class: "col-seen" }, timeEl(c.head.updated_at))));
    }
    replace(tbody, rows.length ? rows : h("tr", {}, h("td", { colspan: 7, class: "empty" }, "No nodes seen.")));
    replace(head, h("h2", { id: "head-h" }, "Head discovery record"),
      c.head ? [dl([
        ["Address", c.head.address || c.head.gcs_address || headIp || ""],
        ["Job server", c.head.job_server_url || c.head.dashboard_url || ""],
        ["Updated", timeEl(c.head.updated_at)],
        ["Expires", timeEl(c.head.expires_at)],
      ]), h("details", {}, h("summary", {}, "Raw record"), h("pre", { class: "code" }, pretty(c.head)))]
        : h("p", { class: "muted" }, "No head.json found: the head has not published its address."));
  }
  const reload = debounce(load, 300);
  const off = onEvent((rec) => { if (rec.stream === "cluster") reload(); });
  const timer = setInterval(load, 10000);
  await load();
  return () => { off(); clearInterval(timer); };
}

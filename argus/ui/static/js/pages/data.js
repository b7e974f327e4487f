// Data: browse your datasets/ models/ code/, your tasks' outputs (jobs/) and the shared
// read-only common/ folders; upload files and folders (resumable, with progress), make
// folders, download, delete files and folders. Paths are shown as
// tasks write them ($HOME/...) and as they are on this deployment's disk (from /me).

import { get, del, post, tusUpload, encodePath, errorText, API } from "../api.js";
import { h, replace, timeEl, fmtBytes, notice } from "../dom.js";

const AREAS = [
  { id: "datasets", label: "datasets", writable: true, path: "$HOME/datasets", help: () => "Your training data (parquet, jsonl). Use as data.train_files=$HOME/datasets/… or train_file: $HOME/datasets/…" },
  { id: "models", label: "models", writable: true, path: "$HOME/models", help: () => "Your models and checkpoints. Use as model_id: $HOME/models/…" },
  { id: "code", label: "code", writable: true, path: "$HOME/code", help: () => "Your code, e.g. a reward function: custom_reward_function.path=$HOME/code/reward.py" },
  { id: "jobs", label: "jobs", writable: false, path: "$HOME/jobs", deletable: true, help: () => "Your tasks' outputs, written by the platform: one folder per attempt (<task id>--a01/) with driver.log, the metrics (*.jsonl), checkpoints/ and result.json. Nothing is uploaded here; once a task has finished you may delete its folders or old checkpoints (a running task's are kept until it ends)." },
  { id: "common/datasets", label: "common/datasets", writable: false, path: "$HOME/common/datasets", help: (p) => `Shared datasets, read-only. Training sees them at ${p.shared}/datasets; write $HOME/common/datasets/… in a spec.` },
  { id: "common/hf", label: "common/hf", writable: false, path: "$HOME/common/hf", help: (p) => `The shared Hugging Face model cache, read-only (admins fill it; ${p.shared}/hf for training). Every job gets it as HF_HUB_CACHE: a hub id such as Qwen/Qwen2.5-0.5B-Instruct whose models--Qwen--Qwen2.5-0.5B-Instruct/ folder is here loads from it without a download. A hub id that is not here is downloaded by each job into your own cache ($HOME/.cache/huggingface), or refused at submit where the cluster has no access to the hub.` },
];

/** This deployment's paths: the shared root and the caller's home (from /me). */
export function paths(me) {
  const shared = (me && me.shared_root) || "<shared>";
  const home = (me && me.home) || `${shared}/users/${(me && me.user_id) || "<you>"}`;
  return { shared, home };
}

/** Where an area's folder is on disk (what $HOME/... expands to for training). */
function onDisk(area, dir, p) {
  const root = area.id.startsWith("common/") ? `${p.shared}/${area.id.slice("common/".length)}` : `${p.home}/${area.id}`;
  return dir ? `${root}/${dir}` : root;
}

function split(areaPath) {
  const parts = (areaPath || "").split("/").filter(Boolean);
  const two = parts.slice(0, 2).join("/");
  const area = AREAS.find((a) => a.id === two) || AREAS.find((a) => a.id === parts[0]) || AREAS[0];
  const n = area.id.split("/").length;
  const matched = parts.slice(0, n).join("/") === area.id;
  return { area, dir: matched ? parts.slice(n).join("/") : "" };
}

const link = (area, dir) => `#/data/${[area, dir].filter(Boolean).map(encodePath).join("/")}`;

export async function render(main, params, ctx) {
  ctx.setTitle("Data");
  const { area, dir } = split(params.area);
  const p = paths(ctx.me);
  const listing = h("div");
  const flash = h("div", { role: "status", "aria-live": "polite" });

  const tabs = h("nav", { class: "tabs", "aria-label": "Folders" }, h("ul", {}, AREAS.map((a) =>
    h("li", {}, h("a", { href: link(a.id, ""), "aria-current": a.id === area.id ? "page" : null },
      a.label, a.writable ? null : h("span", { class: "tag" }, "read-only"))))));

  const crumbs = [h("a", { href: link(area.id, "") }, area.path)];
  let acc = "";
  for (const part of dir.split("/").filter(Boolean)) {
    acc = acc ? `${acc}/${part}` : part;
    crumbs.push(" / ", h("a", { href: link(area.id, acc) }, part));
  }

  const uploadForm = area.writable ? uploadPanel(area, dir, flash, () => load()) : null;
  const usage = h("p", { class: "help", id: "storage-usage" });
  get("/files").then((d) => { usage.textContent = `Your storage: ${d.summary}.`; }).catch(() => {});

  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "Data")),
    h("details", { class: "help-box", open: true },
      h("summary", {}, "Where your files are, and how tasks see them"),
      h("ul", {},
        h("li", {}, h("code", {}, "$HOME/datasets"), ", ", h("code", {}, "$HOME/models"), ", ", h("code", {}, "$HOME/code"),
          ": your own folders (read and write). $HOME is ", h("code", { id: "home-path" }, p.home), " for training."),
        h("li", {}, h("code", {}, "$HOME/common/datasets"), " → ", h("code", {}, `${p.shared}/datasets`), " and ",
          h("code", {}, "$HOME/common/hf"), " → ", h("code", {}, `${p.shared}/hf`), ": shared and read-only."),
        h("li", {}, "In a TaskSpec or command always write the $HOME/… form; the server expands it before the task runs."),
        h("li", {}, "Task outputs: ", h("code", {}, "$HOME/jobs/<task id>--a01/"), " (", h("code", {}, `${p.home}/jobs/`),
          "), one folder per attempt, written by the platform; browse them under ", h("a", { href: link("jobs", "") }, "jobs"), "."))),
    tabs,
    h("p", { class: "help" }, area.help(p)),
    h("nav", { class: "crumbs", "aria-label": "Current folder" }, crumbs),
    h("p", { class: "help" }, "On disk: ", h("code", { id: "disk-path" }, onDisk(area, dir, p))),
    usage, flash, uploadForm, listing);

  async function load() {
    const path = `/files/${encodePath(area.id)}${dir ? `/${encodePath(dir)}` : ""}`;
    let answer;
    try {
      answer = await get(path);
    } catch (err) {
      replace(listing, err.status === 404
        ? notice("info", !dir ? "This folder is empty." : area.writable ? "This folder does not exist (yet). Uploading here creates it." : "This folder does not exist (yet).")
        : notice("error", errorText(err)));
      return;
    }
    const entries = (answer && answer.entries) || [];
    entries.sort((a, b) => (b.is_dir - a.is_dir) || String(a.name).localeCompare(String(b.name)));
    const rows = entries.map((e) => {
      const child = dir ? `${dir}/${e.name}` : e.name;
      const fileUrl = `${API}/files/${encodePath(area.id)}/${encodePath(child)}`;
      const kind = e.type || (e.is_dir ? "dir" : "file");
      // Links a job planted are listed, never followed (the server refuses them too).
      const name = kind === "dir" ? h("a", { href: link(area.id, child), class: "dir" }, `${e.name}/`)
        : kind === "file" ? h("a", { href: fileUrl, download: e.name, class: "file" }, e.name)
          : h("span", { class: "muted", title: "not followed" }, e.name, h("span", { class: "tag" }, kind === "link" ? "symlink" : kind));
      return h("tr", { "data-name": e.name, "data-type": kind },
        h("td", {}, name),
        h("td", { class: "num" }, kind === "file" ? fmtBytes(e.size) : ""),
        h("td", {}, timeEl(e.modified)),
        h("td", { class: "row-actions" },
          kind === "file" ? h("a", { href: fileUrl, download: e.name, class: "btn btn-small", "aria-label": `Download ${e.name}` }, "Download") : null,
          (area.writable && (kind === "file" || kind === "dir" || kind === "link")) ||
          (area.deletable && (kind === "dir" || kind === "file")) ? h("button", {
            type: "button", class: "btn btn-small btn-danger", "aria-label": `Delete ${e.name}`,
            onclick: () => remove(child, e.name, kind === "dir"),
          }, "Delete") : null));
    });
    replace(listing, answer && answer.truncated
      ? notice("info", `This folder holds more than ${entries.length} entries: the first ${entries.length} by name are shown.`) : null,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "files-table" },
      h("caption", { class: "visually-hidden" }, `Files in ${area.path}${dir ? `/${dir}` : ""}`),
      h("thead", {}, h("tr", {}, ["Name", "Size", "Modified", h("span", { class: "visually-hidden" }, "Actions")].map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 4, class: "empty" }, "This folder is empty."))))));
  }

  async function remove(child, name, isDir) {
    const what = isDir ? `the folder ${area.path}/${child} and everything in it` : `${area.path}/${child}`;
    if (!window.confirm(`Delete ${what}? This cannot be undone.`)) return;
    try {
      await del(`/files/${encodePath(area.id)}/${encodePath(child)}${isDir ? "?recursive=true" : ""}`);
      replace(flash, notice("ok", `Deleted ${name}.`));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
    load();
  }

  await load();
  return undefined;
}

function uploadPanel(area, dir, flash, reload) {
  const here = (rel) => [area.id, dir, rel].filter(Boolean).join("/");
  const input = h("input", { type: "file", id: "upload-file", multiple: true });
  const folder = h("input", { type: "file", id: "upload-folder", webkitdirectory: true, multiple: true });
  const bar = h("progress", { id: "upload-progress", max: 100, value: 0, hidden: true, "aria-label": "Upload progress" });
  const pct = h("span", { class: "muted", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "btn btn-primary" }, "Upload");
  const mkdir = h("button", { type: "button", class: "btn", id: "new-folder" }, "New folder");
  const form = h("form", { class: "card upload", id: "upload-form" },
    h("label", { for: "upload-file" }, `Upload files to ${area.path}${dir ? `/${dir}` : ""}/`),
    h("div", { class: "upload-row" }, input),
    h("label", { for: "upload-folder" }, "or a folder (its tree is kept)"),
    h("div", { class: "upload-row" }, folder, button, mkdir, bar, pct),
    h("p", { class: "help" }, "Large files go in resumable 16 MiB chunks, each checked by the server; a file appears under its name only once complete."));
  mkdir.addEventListener("click", async () => {
    const name = (window.prompt("Name of the new folder") || "").trim();
    if (!name) return;
    try {
      await post(`/files/${encodePath(here(name))}`, { op: "mkdir" });
      replace(flash, notice("ok", `Made ${name}/.`));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
    reload();
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    // A folder's files carry their path inside it (webkitRelativePath): the tree is kept.
    const files = [...input.files, ...folder.files].map((f) => ({ file: f, rel: f.webkitRelativePath || f.name }));
    if (!files.length) {
      replace(flash, notice("error", "Choose files or a folder first."));
      return;
    }
    button.disabled = true;
    bar.hidden = false;
    bar.value = 0;
    const total = files.reduce((s, f) => s + f.file.size, 0) || 1;
    let before = 0;
    try {
      for (const { file, rel } of files) {
        await tusUpload(here(rel), file, (loaded) => {
          const p = Math.round(((before + loaded) / total) * 100);
          bar.value = p;
          pct.textContent = `${p}% — ${rel}`;
        });
        before += file.size;
      }
      bar.value = 100;
      pct.textContent = "100% — done";
      replace(flash, notice("ok", files.length > 3 ? `Uploaded ${files.length} files.`
        : `Uploaded ${files.map((f) => f.rel).join(", ")}.`));
      input.value = "";
      folder.value = "";
    } catch (err) {
      bar.hidden = true;
      pct.textContent = "";
      replace(flash, notice("error", `Upload failed: ${errorText(err)}`));
    } finally {
      button.disabled = false;
      reload();
    }
  });
  return form;
}

// SFTP: where the door is, and the caller's SSH keys (add, revoke). docs/sftp.md.

import { get, post, del, encodePath, errorText } from "../api.js";
import { h, replace, timeEl, notice } from "../dom.js";

export async function render(main, _params, ctx) {
  ctx.setTitle("SFTP");
  const me = ctx.me.user_id;
  const base = `/users/${encodePath(me)}/ssh-keys`;
  const flash = h("div", { id: "sftp-flash", "aria-live": "polite" });
  const door = h("section", { class: "card", id: "sftp-door" });
  const tbody = h("tbody");
  const keyText = h("textarea", { id: "ssh-key", name: "public_key", rows: 3, required: true, class: "mono",
    placeholder: "ssh-ed25519 AAAA... you@laptop", "aria-describedby": "ssh-key-help" });
  const label = h("input", { id: "ssh-key-label", name: "label", autocomplete: "off", placeholder: "e.g. laptop" });
  const form = h("form", { class: "card", id: "add-ssh-key", "aria-labelledby": "add-key-h" },
    h("h2", { id: "add-key-h" }, "Add a public key"),
    h("div", { class: "field" }, h("label", { for: "ssh-key" }, "Public key"), keyText),
    h("p", { id: "ssh-key-help", class: "help" },
      "The content of your ~/.ssh/id_ed25519.pub (make one with: ssh-keygen -t ed25519). Never the private key."),
    h("div", { class: "field" }, h("label", { for: "ssh-key-label" }, "Label"), label),
    h("button", { type: "submit", class: "btn btn-primary" }, "Add key"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const k = await post(base, { public_key: keyText.value, label: label.value.trim() });
      replace(flash, notice("ok", `Added ${k.fingerprint}.`));
      form.reset();
      await load();
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
  });

  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "SFTP")),
    flash, door,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "ssh-keys-table" },
      h("caption", {}, "Your SSH keys"),
      h("thead", {}, h("tr", {}, ["Fingerprint", "Label", "Added", "Status", h("span", { class: "visually-hidden" }, "Actions")]
        .map((c) => h("th", { scope: "col" }, c)))),
      tbody)),
    form);

  async function showDoor() {
    try {
      const d = await get("/sftp");
      replace(door, d.enabled
        ? [h("h2", {}, "Connect"),
          h("p", {}, h("code", { id: "sftp-command" }, `sftp -P ${d.port} ${me}@${location.hostname}`)),
          h("p", { class: "help" }, "Host key ", h("code", {}, d.host_key_fingerprint),
            ": check it on your first connection. You see datasets, models and code (yours), jobs (what your tasks wrote, read-only) and common (shared, read-only).")]
        : [h("h2", {}, "Connect"), h("p", { class: "muted" }, "This server does not serve SFTP (v2.sftp.port is 0).")]);
    } catch (err) {
      replace(door, notice("error", errorText(err)));
    }
  }

  async function load() {
    try {
      const keys = await get(base);
      replace(tbody, keys.length ? keys.map((k) => h("tr", { "data-key-id": k.key_id },
        h("td", { class: "mono" }, k.fingerprint),
        h("td", {}, k.label || ""),
        h("td", {}, timeEl(k.added_at)),
        h("td", {}, k.revoked ? "revoked" : "active"),
        h("td", {}, k.revoked ? null : h("button", {
          type: "button", class: "btn btn-small btn-danger", onclick: () => revoke(k),
        }, "Revoke")))) : h("tr", {}, h("td", { colspan: 5, class: "muted" }, "No keys yet.")));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
  }

  async function revoke(k) {
    if (!window.confirm(`Revoke ${k.fingerprint}? Logins with it are refused at once and its open sessions closed.`)) return;
    try {
      await del(`${base}/${encodePath(k.key_id)}`);
      replace(flash, notice("ok", `Revoked ${k.fingerprint}.`));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
    load();
  }

  await Promise.all([showDoor(), load()]);
  return undefined;
}

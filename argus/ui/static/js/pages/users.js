// Users (admin): create, disable/enable, issue and revoke tokens. A new token is shown
// once, in the page only; it is never stored by the browser.

import { get, post, del, encodePath, errorText } from "../api.js";
import { h, replace, timeEl, notice } from "../dom.js";

export async function render(main, _params, ctx) {
  ctx.setTitle("Users");
  const flash = h("div", { id: "users-flash", "aria-live": "polite" });
  const tbody = h("tbody");
  const tokenPanel = h("section", { id: "token-panel", "aria-live": "polite" });

  // The server's rule (argus/service/ids.py); the title is the browser's message on a mismatch.
  const USER_ID_RULE = "1 to 32 characters: lowercase letters (a-z), digits, _ or -, starting with a letter";
  const idInput = h("input", { id: "new-user-id", name: "user_id", required: true, pattern: "[a-z][a-z0-9_\\-]{0,31}", title: `User id: ${USER_ID_RULE}`, autocomplete: "off", "aria-describedby": "new-user-help" });
  const nameInput = h("input", { id: "new-user-name", name: "display_name", autocomplete: "off" });
  const adminBox = h("input", { id: "new-user-admin", name: "is_admin", type: "checkbox" });
  const createForm = h("form", { class: "card inline-form", id: "create-user", "aria-labelledby": "create-h" },
    h("h2", { id: "create-h" }, "Create a user"),
    h("div", { class: "field" }, h("label", { for: "new-user-id" }, "User id"), idInput),
    h("div", { class: "field" }, h("label", { for: "new-user-name" }, "Display name"), nameInput),
    h("div", { class: "field field-check" }, adminBox, h("label", { for: "new-user-admin" }, "Administrator")),
    h("button", { type: "submit", class: "btn btn-primary" }, "Create user"),
    h("p", { id: "new-user-help", class: "help form-note" },
      `User id: ${USER_ID_RULE}; it names the user's home folder and their task ids.`));
  createForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await post("/users", { user_id: idInput.value.trim(), display_name: nameInput.value.trim(), is_admin: adminBox.checked });
      replace(flash, notice("ok", `Created user ${idInput.value.trim()}. Issue a token for them below.`));
      const created = idInput.value.trim();
      createForm.reset();
      await load();
      showTokens(created);
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
  });

  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "Users")),
    flash,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "users-table" },
      h("caption", { class: "visually-hidden" }, "Users"),
      h("thead", {}, h("tr", {}, ["User", "Display name", "Role", "Limits", "Status", "Created", h("span", { class: "visually-hidden" }, "Actions")]
        .map((c) => h("th", { scope: "col" }, c)))),
      tbody)),
    tokenPanel,
    createForm);

  async function load() {
    try {
      const answer = await get("/users");
      const users = Array.isArray(answer) ? answer : (answer.items || answer.users || []);
      replace(tbody, users.map((u) => {
        const disabled = Boolean(u.disabled ?? (u.enabled === false));
        return h("tr", { "data-user": u.user_id },
          h("td", { class: "mono" }, u.user_id),
          h("td", {}, u.display_name || ""),
          h("td", {}, u.is_admin ? h("span", { class: "tag" }, "admin") : "user"),
          h("td", { class: "limits" }, limits(u)),
          h("td", {}, disabled ? h("span", { class: "badge state-canceled" }, "disabled") : h("span", { class: "badge state-succeeded" }, "active")),
          h("td", {}, timeEl(u.created_at)),
          h("td", { class: "row-actions" },
            h("button", { type: "button", class: "btn btn-small", onclick: () => showTokens(u.user_id) }, "Tokens"),
            u.user_id === ctx.me.user_id ? null : h("button", {
              type: "button", class: `btn btn-small ${disabled ? "" : "btn-danger"}`,
              onclick: () => toggle(u.user_id, disabled),
            }, disabled ? "Enable" : "Disable")));
      }));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
  }

  async function toggle(userId, disabled) {
    if (!disabled && !window.confirm(`Disable ${userId}? Their tokens stop working; their tasks keep running.`)) return;
    try {
      await post(`/users/${encodePath(userId)}/${disabled ? "enable" : "disable"}`, {});
      replace(flash, notice("ok", `${disabled ? "Enabled" : "Disabled"} ${userId}.`));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
    load();
  }

  async function showTokens(userId, fresh) {
    const base = `/users/${encodePath(userId)}/tokens`;
    let tokens = [];
    let error = null;
    try {
      const answer = await get(base);
      tokens = Array.isArray(answer) ? answer : (answer.items || answer.tokens || []);
    } catch (err) {
      error = errorText(err);
    }
    const label = h("input", { id: "token-label", name: "label", autocomplete: "off", placeholder: "e.g. laptop, ci" });
    const issueForm = h("form", { class: "inline-form spaced", id: "issue-token", "aria-label": `Issue a token for ${userId}` },
      h("div", { class: "field" }, h("label", { for: "token-label" }, "Label"), label),
      h("button", { type: "submit", class: "btn btn-primary" }, "Issue token"));
    issueForm.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const t = await post(base, { label: label.value.trim() });
        await showTokens(userId, t);
      } catch (err) {
        replace(flash, notice("error", errorText(err)));
      }
    });
    replace(tokenPanel,
      h("div", { class: "card" },
        h("h2", {}, "Tokens of ", h("code", {}, userId)),
        fresh ? freshToken(fresh) : null,
        error ? notice("error", error) : null,
        tokens.length ? h("table", { class: "data", id: "tokens-table" },
          h("thead", {}, h("tr", {}, ["Token id", "Label", "Issued", "Status", h("span", { class: "visually-hidden" }, "Actions")].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, tokens.map((t) => {
            const revoked = Boolean(t.revoked ?? t.revoked_at);
            return h("tr", { "data-token-id": t.token_id },
              h("td", { class: "mono" }, t.token_id),
              h("td", {}, t.label || ""),
              h("td", {}, timeEl(t.issued_at)),
              h("td", {}, revoked ? "revoked" : "active"),
              h("td", {}, revoked ? null : h("button", {
                type: "button", class: "btn btn-small btn-danger",
                onclick: () => revoke(userId, t.token_id),
              }, "Revoke")));
          }))) : h("p", { class: "muted" }, "No tokens."),
        issueForm));
    tokenPanel.scrollIntoView({ block: "nearest" });
  }

  async function revoke(userId, tokenId) {
    if (!window.confirm(`Revoke token ${tokenId} of ${userId}? Programs using it stop working at once.`)) return;
    try {
      await del(`/users/${encodePath(userId)}/tokens/${encodePath(tokenId)}`);
      replace(flash, notice("ok", `Revoked ${tokenId}.`));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
    showTokens(userId);
  }

  await load();
  return undefined;
}

function freshToken(t) {
  const value = h("input", { id: "new-token", readonly: true, value: t.token, class: "mono", size: 64, "aria-describedby": "new-token-help" });
  const copy = h("button", { type: "button", class: "btn", onclick: async () => {
    value.select();
    try { await navigator.clipboard.writeText(t.token); copy.textContent = "Copied"; } catch { document.execCommand("copy"); copy.textContent = "Copied"; }
  } }, "Copy");
  return notice("warning",
    h("label", { for: "new-token" }, h("strong", {}, `New token ${t.token_id}`)),
    h("div", { class: "upload-row" }, value, copy),
    h("p", { id: "new-token-help" }, "Copy it now: it is shown only once and cannot be recovered."));
}

// What the user's tasks may ask for (set with `argus users set`); admins are not limited.
function limits(u) {
  if (u.is_admin) return "none";
  const parts = [`priority ≤ ${u.max_priority ?? 0}`, u.may_pin ? "may pin" : "preemptible"];
  if (u.max_queued) parts.push(`≤ ${u.max_queued} waiting`);
  if (u.max_gpus) parts.push(`≤ ${u.max_gpus} GPUs held`);
  return parts.join(", ");
}

// Teams (admin): each team's share, quotas per GPU model and members; create a team, move
// a user into one, set a share or a quota. Every change is an event with its author
// (GET/POST /api/v2/teams; docs/teams.md).

import { get, post, encodePath, errorText } from "../api.js";
import { h, replace, notice } from "../dom.js";

const limit = (v) => (v === null || v === undefined ? "no limit" : String(v));

function field(id, label, attrs = {}) {
  const input = h("input", { id, name: id, autocomplete: "off", ...attrs });
  return [input, h("div", { class: "field" }, h("label", { for: id }, label), input)];
}

export async function render(main, _params, ctx) {
  ctx.setTitle("Teams");
  const flash = h("div", { id: "teams-flash", "aria-live": "polite" });
  const tbody = h("tbody");

  const [newId, newIdField] = field("new-team-id", "Team id", { required: true, pattern: "[a-z][a-z0-9_\\-]{0,31}" });
  const [newShare, newShareField] = field("new-team-share", "Share", { type: "number", min: "0.001", step: "any", value: "1" });
  const createForm = h("form", { class: "card inline-form", id: "create-team" },
    h("h2", {}, "Create a team"), newIdField, newShareField,
    h("button", { type: "submit", class: "btn btn-primary" }, "Create team"));

  const [moveUser, moveUserField] = field("move-user", "User id", { required: true });
  const [moveTeam, moveTeamField] = field("move-team", "Into team", { required: true });
  const moveForm = h("form", { class: "card inline-form", id: "move-member" },
    h("h2", {}, "Move a user"), moveUserField, moveTeamField,
    h("button", { type: "submit", class: "btn btn-primary" }, "Move"));

  const [qTeam, qTeamField] = field("quota-team", "Team", { required: true });
  const [qModel, qModelField] = field("quota-model", "GPU model", { value: "any" });
  const [qNominal, qNominalField] = field("quota-nominal", "Nominal GPUs", { type: "number", min: "0", step: "any", value: "0" });
  const [qBorrow, qBorrowField] = field("quota-borrow", "Borrowing limit (empty: none)", { type: "number", min: "0", step: "any" });
  const [qLend, qLendField] = field("quota-lend", "Lending limit (empty: none)", { type: "number", min: "0", step: "any" });
  const quotaForm = h("form", { class: "card inline-form", id: "set-quota" },
    h("h2", {}, "Set a quota"), qTeamField, qModelField, qNominalField, qBorrowField, qLendField,
    h("button", { type: "submit", class: "btn btn-primary" }, "Set quota"));

  const num = (input) => (input.value.trim() === "" ? null : Number(input.value));
  async function act(form, path, body, done) {
    try {
      await post(path, body);
      replace(flash, notice("ok", done));
      form.reset();
      await load();
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
  }
  createForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = newId.value.trim();
    act(createForm, "/teams", { team_id: id, share: Number(newShare.value) }, `Created team ${id}.`);
  });
  moveForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const [user, team] = [moveUser.value.trim(), moveTeam.value.trim()];
    act(moveForm, `/teams/${encodePath(team)}/members`, { user_id: user }, `Moved ${user} into ${team}.`);
  });
  quotaForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const team = qTeam.value.trim();
    act(quotaForm, `/teams/${encodePath(team)}/quotas`, {
      gpu_model: qModel.value.trim(), nominal_gpus: Number(qNominal.value || 0),
      borrowing_limit: num(qBorrow), lending_limit: num(qLend),
    }, `Set the quota of ${team}.`);
  });

  replace(main,
    h("div", { class: "page-head" }, h("h1", {}, "Teams")),
    flash,
    h("div", { class: "table-wrap" }, h("table", { class: "data", id: "teams-table" },
      h("caption", { class: "visually-hidden" }, "Teams"),
      h("thead", {}, h("tr", {}, ["Team", "Share", "Quotas (nominal / borrowing / lending)", "Members"]
        .map((c) => h("th", { scope: "col" }, c)))),
      tbody)),
    createForm, moveForm, quotaForm);

  async function load() {
    try {
      const teams = await get("/teams");
      const details = await Promise.all(teams.map((t) => get(`/teams/${encodePath(t.team_id)}`)));
      replace(tbody, details.map((t) => h("tr", { "data-team": t.team_id },
        h("td", { class: "mono" }, t.team_id),
        h("td", {}, String(t.share)),
        h("td", {}, t.quotas.length ? h("ul", { class: "plain" }, t.quotas.map((q) =>
          h("li", {}, `${q.gpu_model || "any"}: ${q.nominal_gpus} / ${limit(q.borrowing_limit)} / ${limit(q.lending_limit)}`)))
          : "none"),
        h("td", { class: "members" }, t.members.map((m) => m.user_id).join(", ") || "none"))));
    } catch (err) {
      replace(flash, notice("error", errorText(err)));
    }
  }
  await load();
}

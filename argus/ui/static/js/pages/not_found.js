// The page for unknown routes and for ids the API answers 404 to (including other users'
// tasks: the API does not say whether they exist).

import { h, replace } from "../dom.js";

export function renderNotFound(main, what) {
  replace(main,
    h("section", { class: "not-found", "data-testid": "not-found" },
      h("h1", {}, "Not found"),
      h("p", {}, what || "There is nothing at this address."),
      h("p", {}, h("a", { href: "#/tasks" }, "Back to your tasks"))));
}

export async function render(main, _params, ctx) {
  ctx.setTitle("Not found");
  renderNotFound(main);
}

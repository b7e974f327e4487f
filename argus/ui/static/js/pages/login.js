// Log in with an API token. The server answers with an HttpOnly session cookie; the token
// itself is sent once in a POST body and is never stored by the browser.

import { post, get, errorText } from "../api.js";
import { h, replace } from "../dom.js";

export async function render(main, _params, ctx) {
  ctx.setTitle("Log in");
  const error = h("div", { id: "login-error", role: "alert", "aria-live": "assertive" });
  const input = h("input", {
    id: "token", name: "token", type: "password", autocomplete: "off", required: true,
    spellcheck: "false", "aria-describedby": "token-help login-error",
  });
  const button = h("button", { type: "submit", class: "btn btn-primary" }, "Log in");
  // method=post: should the script ever fail, the browser would post the form rather than
  // put the token into the URL of a GET.
  const form = h("form", { class: "card login", method: "post", action: "#/login" },
    h("h1", {}, "Log in to Argus"),
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { id: "token-help", class: "help" },
      "Paste the token your administrator gave you (or one you issued yourself). ",
      "It is exchanged for a session cookie and not stored by the browser."),
    button,
    error,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    replace(error);
    button.disabled = true;
    try {
      await post("/auth/login", { token: input.value.trim() }, { noAuthRedirect: true });
      input.value = "";
      const me = await get("/me", { noAuthRedirect: true });
      await ctx.afterLogin(me);
    } catch (err) {
      replace(error, h("p", { class: "notice notice-error" },
        err.status === 401 || err.status === 403 ? "That token was not accepted: it is unknown, revoked, or its user is disabled." : errorText(err)));
      input.focus();
    } finally {
      button.disabled = false;
    }
  });
  replace(main, form);
  input.focus();
}

// Sign-in: paste an API token; it is checked against /v1/caller and kept in localStorage.

import { h } from "../h";
import { openSession, type Session } from "../session";
import { errorBox } from "../ui";

export function signInPage(message: unknown, onSignedIn: (session: Session, token: string) => void): HTMLElement {
  const input = h("input", {
    id: "token-input",
    type: "password",
    placeholder: "mldiag_…",
    autocomplete: "off",
    name: "token",
  });
  const button = h("button", { id: "sign-in", class: "button primary", type: "submit" }, "Sign in");
  const status = h("div", { class: "signin-status" }, message ? errorBox(message) : null);
  const form = h(
    "form",
    {
      class: "signin",
      onsubmit: async (event) => {
        event.preventDefault();
        const token = input.value.trim();
        if (!token) {
          input.focus();
          return;
        }
        button.disabled = true;
        status.replaceChildren(h("span", { class: "muted" }, "checking…"));
        try {
          onSignedIn(await openSession(token), token);
        } catch (error) {
          status.replaceChildren(errorBox(error));
          button.disabled = false;
          input.select();
        }
      },
    },
    h("h1", {}, h("span", { class: "brand-mark" }, "◆"), " mldiag"),
    h("p", { class: "muted" }, "Paste an API token to open the console."),
    h("label", { htmlFor: "token-input" }, "API token"),
    input,
    button,
    status,
    h(
      "p",
      { class: "hint" },
      "Tokens come from ",
      h("code", {}, "mldiag auth tokens create --role viewer"),
      "; the one ",
      h("code", {}, "mldiag up"),
      " made is in ",
      h("code", {}, "$MLDIAG_HOME/admin-token"),
      ".",
    ),
  );
  queueMicrotask(() => input.focus());
  return h("div", { class: "signin-page" }, form);
}

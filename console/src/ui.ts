// Small pieces every page uses: error boxes, badges, cards, key/value lists.

import { ApiError } from "./api";
import { shortState } from "./format";
import { h } from "./h";

/** The one way an error is shown: its stable code and its message. */
export function errorBox(error: unknown): HTMLElement {
  const code = error instanceof ApiError ? error.code : "error";
  const message = error instanceof Error ? error.message : String(error);
  return h(
    "div",
    { class: "error", testid: "error", role: "alert", dataset: { code } },
    h("code", { class: "error-code" }, code),
    h("span", {}, message),
  );
}

export function stateBadge(state: string): HTMLElement {
  const name = shortState(state);
  return h("span", { class: `badge state-${name.toLowerCase()}`, testid: "state" }, name);
}

export function severityBadge(severity: string): HTMLElement {
  return h("span", { class: `badge severity-${severity.toLowerCase()}` }, severity);
}

export function phaseBadge(phase: string): HTMLElement {
  return h("span", { class: `badge phase-${phase.toLowerCase()}` }, phase);
}

export function card(title: string, ...children: (Node | string | null | false)[]): HTMLElement {
  return h("section", { class: "card" }, h("h3", {}, title), ...children);
}

export function kv(pairs: [string, Node | string | number | null][]): HTMLElement {
  return h(
    "dl",
    { class: "kv" },
    pairs.flatMap(([key, value]) => [h("dt", {}, key), h("dd", {}, value ?? "—")]),
  );
}

/** A row of label-over-value facts (run header, event detail). */
export function facts(pairs: [string, Node | string | null][]): HTMLElement {
  return h(
    "div",
    { class: "facts" },
    pairs.map(([label, value]) =>
      h("div", { class: "fact" }, h("span", { class: "fact-label" }, label), h("span", { class: "fact-value" }, value ?? "—")),
    ),
  );
}

export function loading(text = "loading…"): HTMLElement {
  return h("div", { class: "muted loading-text" }, text);
}

export function empty(text: string): HTMLElement {
  return h("div", { class: "empty" }, text);
}

export function labelChips(labels: Record<string, string>): HTMLElement {
  return h(
    "span",
    { class: "chips" },
    Object.entries(labels).map(([key, value]) => h("span", { class: "chip" }, `${key}=${value}`)),
  );
}

/** Wire a modal: closes on Escape and on a click outside; returns the closer. */
export function modal(title: string, body: HTMLElement, testid: string, onClose?: () => void): () => void {
  const close = (): void => {
    overlay.remove();
    document.removeEventListener("keydown", onKey);
    onClose?.();
  };
  const onKey = (event: KeyboardEvent): void => {
    if (event.key === "Escape") close();
  };
  const dialog = h(
    "div",
    { class: "dialog", testid, role: "dialog" },
    h("header", {}, h("h3", {}, title), h("button", { class: "icon-button", title: "Close", onclick: () => close() }, "×")),
    body,
  );
  const overlay = h("div", {
    class: "overlay",
    onclick: (event) => {
      if (event.target === overlay) close();
    },
  });
  overlay.append(dialog);
  document.body.append(overlay);
  document.addEventListener("keydown", onKey);
  return close;
}

// The controls for how a page's charts look, for every chart of the page at once: smoothing
// (a slider, 0 … 0.99) and a log y axis. Both live in the page's URL (`smooth=`, `y=log`), so
// a shared link shows what its sender saw; smoothing is also remembered by the browser.

import type { Look } from "./chart";
import { h } from "./h";
import { initialSmoothing, MAX_SMOOTHING, rememberSmoothing } from "./smoothing";

export interface LookControls {
  el: HTMLElement;
  look(): Look;
  /** The URL parameters that say the current look (none for the defaults). */
  params(): Record<string, string>;
}

export function lookControls(query: URLSearchParams, onChange: (look: Look) => void): LookControls {
  const look: Look = { smoothing: initialSmoothing(query, localStorage), logScale: query.get("y") === "log" };
  const value = h("output", { class: "smoothing-value", testid: "smoothing-value" }, look.smoothing.toFixed(2));
  const slider = h("input", {
    type: "range",
    min: "0",
    max: String(MAX_SMOOTHING),
    step: "0.01",
    value: String(look.smoothing),
    testid: "smoothing",
    title: "Exponential moving average, debiased (0: raw); the raw line stays faint behind",
    oninput: () => {
      look.smoothing = Number(slider.value);
      value.textContent = look.smoothing.toFixed(2);
      rememberSmoothing(look.smoothing, localStorage);
      onChange({ ...look });
    },
  });
  const log = h("input", {
    type: "checkbox",
    testid: "log-scale-toggle",
    checked: look.logScale,
    onchange: () => {
      look.logScale = log.checked;
      onChange({ ...look });
    },
  });
  const el = h(
    "span",
    { class: "look-controls" },
    h("label", { class: "inline smoothing" }, "smoothing ", slider, value),
    h("label", { class: "inline", title: "Log y axis: values ≤ 0 are left out (each chart says how many)" }, log, " log y"),
  );
  return {
    el,
    look: () => ({ ...look }),
    params: () => ({
      ...(look.smoothing > 0 ? { smooth: String(look.smoothing) } : {}),
      ...(look.logScale ? { y: "log" } : {}),
    }),
  };
}

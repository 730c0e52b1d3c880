// Configs tab: the run's configs flattened to dotted keys, searchable.

import { formatJson } from "../format";
import { h, replace } from "../h";
import type { Scope } from "../scope";
import type { FlatConfigsResponse } from "../types";
import { empty, errorBox, loading } from "../ui";
import { runPath, type RunView } from "./run";

const SECTION_NAMES: Record<string, string> = {
  userConfigs: "user",
  softwareConfigs: "software",
  hardwareConfigs: "hardware",
};

export function configsTab(view: RunView, scope: Scope, query: URLSearchParams): HTMLElement {
  const search = h("input", {
    type: "search",
    placeholder: "Search keys and values",
    testid: "configs-search",
    value: query.get("q") ?? "",
    oninput: () => apply(),
  });
  const section = h(
    "select",
    { testid: "configs-section", onchange: () => apply() },
    h("option", { value: "" }, "All sections"),
    Object.entries(SECTION_NAMES).map(([value, label]) => h("option", { value }, label)),
  );
  const count = h("span", { class: "muted" });
  const body = h("div", {}, loading());
  let rows: { el: HTMLElement; text: string; section: string }[] = [];

  function apply(): void {
    const text = search.value.trim().toLowerCase();
    let shown = 0;
    for (const row of rows) {
      const show = (!text || row.text.includes(text)) && (!section.value || row.section === section.value);
      row.el.hidden = !show;
      if (show) shown++;
    }
    count.textContent = `${shown} of ${rows.length} keys`;
  }

  void (async () => {
    try {
      const answer = await view.session.api.get<FlatConfigsResponse>(runPath(view.runId, "/configs"), {}, scope.signal);
      if (answer.entries.length === 0) {
        replace(body, empty("No configs recorded."));
        return;
      }
      rows = answer.entries.map((entry) => {
        const value = formatJson(entry.value);
        const el = h(
          "tr",
          { dataset: { key: entry.key, section: entry.section } },
          h("td", { class: "muted" }, SECTION_NAMES[entry.section] ?? entry.section),
          h("td", { class: "key" }, entry.key),
          h("td", { class: `value type-${entry.value === null ? "null" : typeof entry.value}` }, value),
        );
        return { el, text: `${entry.key} ${value}`.toLowerCase(), section: entry.section };
      });
      replace(
        body,
        h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            { class: "table compact configs-table", testid: "configs-table" },
            h("thead", {}, h("tr", {}, h("th", {}, "Section"), h("th", {}, "Key"), h("th", {}, "Value"))),
            h("tbody", {}, rows.map((row) => row.el)),
          ),
        ),
      );
      apply();
    } catch (error) {
      if (!scope.disposed) replace(body, errorBox(error));
    }
  })();

  return h("div", { class: "configs-tab" }, h("div", { class: "toolbar" }, search, section, h("span", { class: "spacer" }), count), body);
}

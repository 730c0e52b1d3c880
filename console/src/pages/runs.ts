// The runs table: filters (AIP-160 on the server), sortable columns, paging, pick runs to
// compare, refreshed live when runs change.

import { formatDuration, formatNumber, formatTime, secondsBetween } from "../format";
import { h, replace } from "../h";
import { navigate, replaceHash, runHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { watch } from "../sse";
import { Throttle } from "../throttle";
import type { ListRunsResponse, Run } from "../types";
import { buildFilter, type Filters } from "../filters";
import { errorBox, labelChips, stateBadge } from "../ui";

const DEFAULT_ORDER = "createTime desc";

const SUMMARY_COLUMNS: [keyof Run["metrics"], string, (v: number) => string][] = [
  ["avgStepTime", "Avg step time", (v) => formatDuration(v)],
  ["avgMfu", "Avg MFU", (v) => `${formatNumber(v, 3)}%`],
  ["avgThroughput", "Avg throughput", (v) => `${formatNumber(v, 4)}/s`],
  ["avgLatency", "Avg latency", (v) => formatDuration(v)],
];

/** The fixed columns, in order, with the field each sorts by (null: not sortable). */
const COLUMNS: [string, string | null][] = [
  ["Name", "displayName"],
  ["State", "state"],
  ["Run set", "runSet"],
  ["Labels", null],
  ["Created", "createTime"],
  ["Duration", null],
];

export function runsPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  const filters: Filters = {
    state: query.get("state") ?? "",
    runSet: query.get("runSet") ?? "",
    label: query.get("label") ?? "",
    after: query.get("after") ?? "",
    before: query.get("before") ?? "",
    q: query.get("q") ?? "",
    orderBy: query.get("orderBy") ?? DEFAULT_ORDER,
    pageSize: query.get("pageSize") ?? "25",
  };
  const selected = new Set<string>();
  // Tokens of the pages before the current one, so "previous" can go back.
  let tokens: string[] = [];
  let pageToken = "";
  let nextToken = "";

  const table = h("table", { class: "table runs-table", testid: "runs-table" });
  const status = h("div", { class: "table-status" });
  const errorSlot = h("div");
  const filterText = h("code", { class: "filter-text", testid: "filter-text" });
  const prev = h("button", { class: "button", testid: "prev-page", onclick: () => go(-1) }, "‹ Prev");
  const next = h("button", { class: "button", testid: "next-page", onclick: () => go(1) }, "Next ›");
  const pageInfo = h("span", { class: "muted" });
  const compare = h(
    "button",
    {
      class: "button primary",
      testid: "compare-button",
      onclick: () => navigate(`#/compare?runs=${[...selected].map(encodeURIComponent).join(",")}`),
    },
    "Compare",
  );
  const live = h("span", { class: "live", testid: "live", title: "Live updates" });

  function input(key: keyof Filters, props: Record<string, string>, testid: string): HTMLInputElement {
    const el = h("input", { ...props, value: filters[key], testid, name: key });
    let timer: ReturnType<typeof setTimeout> | undefined;
    el.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => setFilter(key, el.value), props["type"] === "datetime-local" ? 0 : 300);
    });
    el.addEventListener("change", () => {
      clearTimeout(timer);
      setFilter(key, el.value);
    });
    return el;
  }

  const stateSelect = h(
    "select",
    { testid: "state-filter", name: "state", onchange: () => setFilter("state", stateSelect.value) },
    [
      ["", "Any state"],
      ["STATE_ACTIVE", "Active"],
      ["STATE_COMPLETED", "Completed"],
      ["STATE_FAILED", "Failed"],
    ].map(([value, label]) => h("option", { value: value ?? "", selected: filters.state === value }, label ?? "")),
  );
  const pageSizeSelect = h(
    "select",
    { testid: "page-size", title: "Runs per page", onchange: () => setFilter("pageSize", pageSizeSelect.value) },
    ["10", "25", "50", "100"].map((size) => h("option", { value: size, selected: filters.pageSize === size }, `${size} / page`)),
  );

  const toolbar = h(
    "div",
    { class: "toolbar filters" },
    input("q", { type: "search", placeholder: "Search display name", class: "search" }, "search"),
    stateSelect,
    input("runSet", { type: "text", placeholder: "Run set" }, "runset-filter"),
    input("label", { type: "text", placeholder: "label key=value" }, "label-filter"),
    h("label", { class: "inline" }, "Created after ", input("after", { type: "datetime-local" }, "created-after")),
    h("label", { class: "inline" }, "before ", input("before", { type: "datetime-local" }, "created-before")),
  );

  function setFilter(key: keyof Filters, value: string): void {
    if (filters[key] === value) return;
    filters[key] = value;
    tokens = [];
    pageToken = "";
    syncHash();
    void load();
  }

  function syncHash(): void {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(filters)) {
      if (value && !(key === "orderBy" && value === DEFAULT_ORDER) && !(key === "pageSize" && value === "25")) {
        params.set(key, value);
      }
    }
    const text = params.toString();
    replaceHash(text ? `#/runs?${text}` : "#/runs");
  }

  function go(direction: 1 | -1): void {
    if (direction === 1 && nextToken) {
      tokens.push(pageToken);
      pageToken = nextToken;
    } else if (direction === -1 && tokens.length) {
      pageToken = tokens.pop() ?? "";
    } else return;
    void load();
  }

  function sortBy(field: string): void {
    const [current, dir] = filters.orderBy.split(/\s+/);
    const descending = current === field ? dir !== "desc" : field === "createTime";
    setFilter("orderBy", descending ? `${field} desc` : field);
  }

  function updateCompare(): void {
    compare.disabled = selected.size < 2;
    compare.textContent = selected.size ? `Compare (${selected.size})` : "Compare";
  }

  function render(runs: Run[]): void {
    const [orderField, orderDir] = filters.orderBy.split(/\s+/);
    const summary = SUMMARY_COLUMNS.filter(([key]) => runs.some((run) => run.metrics?.[key] != null));
    const head = h(
      "tr",
      {},
      h("th", { class: "check" }),
      COLUMNS.map(([label, field]) =>
        field === null
          ? h("th", {}, label)
          : h(
              "th",
              {
                class: `sortable${orderField === field ? " sorted" : ""}`,
                dataset: { sort: field },
                title: `Sort by ${label.toLowerCase()}`,
                onclick: () => sortBy(field),
              },
              label,
              orderField === field ? h("span", { class: "sort-arrow" }, orderDir === "desc" ? " ▼" : " ▲") : null,
            ),
      ),
      summary.map(([, label]) => h("th", { class: "num" }, label)),
    );
    const rows = runs.map((run) => {
      const box = h("input", {
        type: "checkbox",
        checked: selected.has(run.runId),
        title: "Pick to compare",
        testid: "run-select",
        onchange: () => {
          if (box.checked) selected.add(run.runId);
          else selected.delete(run.runId);
          row.classList.toggle("picked", box.checked);
          updateCompare();
        },
      });
      const row = h(
        "tr",
        {
          class: selected.has(run.runId) ? "picked" : "",
          dataset: { runId: run.runId },
          onclick: (event) => {
            const target = event.target as HTMLElement;
            if (target.closest("input, a, button")) return;
            navigate(runHref(run.runId));
          },
        },
        h("td", { class: "check" }, box),
        h(
          "td",
          { class: "name" },
          h("a", { href: runHref(run.runId) }, run.displayName || run.runId),
          run.displayName && run.displayName !== run.runId ? h("span", { class: "sub" }, run.runId) : null,
        ),
        h("td", {}, stateBadge(run.state)),
        h("td", {}, run.runSet),
        h("td", {}, labelChips(run.labels)),
        h("td", { title: run.createTime }, formatTime(run.createTime)),
        h("td", {}, formatDuration(secondsBetween(run.createTime, run.endTime)), run.endTime ? "" : h("span", { class: "sub" }, "running")),
        summary.map(([key, , format]) => {
          const value = run.metrics?.[key];
          return h("td", { class: "num" }, value == null ? "—" : format(value));
        }),
      );
      return row;
    });
    replace(
      table,
      h("thead", {}, head),
      h(
        "tbody",
        {},
        rows.length
          ? rows
          : h("tr", {}, h("td", { colSpan: 1 + COLUMNS.length + summary.length, class: "empty" }, "No runs match these filters.")),
      ),
    );
  }

  let generation = 0;
  async function load(): Promise<void> {
    const mine = ++generation;
    const filter = buildFilter(filters);
    filterText.textContent = filter || "(no filter)";
    status.textContent = "loading…";
    try {
      const page = await session.api.get<ListRunsResponse>(
        "/v1/machineLearningRuns",
        { pageSize: filters.pageSize, pageToken, filter, orderBy: filters.orderBy },
        scope.signal,
      );
      if (mine !== generation) return;
      errorSlot.replaceChildren();
      nextToken = page.nextPageToken;
      render(page.machineLearningRuns);
      prev.disabled = tokens.length === 0;
      next.disabled = !nextToken;
      pageInfo.textContent = `page ${tokens.length + 1}`;
      status.textContent = `${page.machineLearningRuns.length} run(s) on this page`;
    } catch (error) {
      if (scope.disposed || mine !== generation) return;
      status.textContent = "";
      replace(errorSlot, errorBox(error));
    }
  }

  updateCompare();
  void load();
  const refresher = new Throttle(() => load(), 1000);
  scope.add(() => refresher.stop());
  watch(session.api, "/v1/machineLearningRuns:watch", scope, {
    onUpdate: (update) => {
      if (update.kind === "run") refresher.trigger();
    },
    onResync: () => refresher.trigger(),
    onState: (state) => {
      live.className = `live ${state}`;
      live.textContent = state === "live" ? "● live" : state === "connecting" ? "○ connecting" : "○ offline";
    },
  });

  return h(
    "div",
    { class: "page runs-page" },
    h("div", { class: "page-head" }, h("h2", {}, "Runs"), live, h("span", { class: "spacer" }), compare),
    toolbar,
    h("div", { class: "filter-line muted" }, "filter ", filterText),
    errorSlot,
    h("div", { class: "table-wrap" }, table),
    h("div", { class: "pager" }, status, h("span", { class: "spacer" }), pageSizeSelect, prev, pageInfo, next),
  );
}

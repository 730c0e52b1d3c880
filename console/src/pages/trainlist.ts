// What the training API's list pages (jobs, tuning jobs, models) share: the project and
// location inputs, paging by token, newest first, the empty and unavailable notices, and, for
// resources with a state, the 2 s refresh while one on the page has not ended plus a nudge
// whenever the runs stream says a run changed (each such resource is a run).

import { type Child, h, replace } from "../h";
import { navigate, parentOf, type Parent, replaceHash } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { watch } from "../sse";
import { Throttle } from "../throttle";
import { liveMark, Poller, trainingErrorNotice } from "./jobparts";

const PAGE_SIZE = 50;

/** One list page's resource: where it is listed and how its table, notices and status read. */
export interface TrainingList<T, P extends { nextPageToken?: string }> {
  /** Prefix of the page's own test ids (`jobs` → `jobs-table`, `jobs-status`, `jobs-empty`…). */
  kind: string;
  pageClass: string;
  tableClass: string;
  title: string;
  /** The page's own address for a parent (kept in the hash when the inputs change). */
  href: (parent: Parent) => string;
  /** The API path listing a parent's resources. */
  path: (parent: Parent) => string;
  items: (page: P) => T[];
  /** The time that orders the table, newest first. */
  sortTime: (item: T) => string | null | undefined;
  columns: string[];
  row: (item: T, parent: Parent) => HTMLElement;
  /** The empty notice's text after "No … in projects/p/locations/l yet." */
  empty: (parent: Parent) => Child[];
  /** The status line's noun: `job(s)` → "3 job(s) on this page". */
  noun: string;
  /**
   * Resources with a state: whether one has not ended, and the live mark's title. The page
   * then refreshes while one is going and on runs-stream changes; without it the page loads
   * once and has a Refresh button.
   */
  live?: { title: string; going: (item: T) => boolean };
}

/** A table row that opens `href` when clicked anywhere but on its own links and buttons. */
export function clickableRow(href: string, dataset: Record<string, string>, ...cells: Child[]): HTMLElement {
  return h(
    "tr",
    {
      class: "clickable",
      dataset,
      onclick: (event) => {
        if ((event.target as HTMLElement).closest("a, button")) return;
        navigate(href);
      },
    },
    ...cells,
  );
}

export function trainingListPage<T, P extends { nextPageToken?: string }>(
  session: Session,
  scope: Scope,
  query: URLSearchParams,
  spec: TrainingList<T, P>,
): HTMLElement {
  let parent: Parent = parentOf(query);
  let tokens: string[] = [];
  let pageToken = "";
  let nextToken = "";

  const table = h("table", { class: spec.tableClass, testid: `${spec.kind}-table` });
  const body = h("div", { class: "table-wrap" }, table);
  const errorSlot = h("div");
  const status = h("div", { class: "table-status", testid: `${spec.kind}-status` });
  const live = spec.live ? liveMark(spec.live.title, "○ idle") : null;
  const prev = h("button", { class: "button", testid: "prev-page", onclick: () => go(-1) }, "‹ Prev");
  const next = h("button", { class: "button", testid: "next-page", onclick: () => go(1) }, "Next ›");
  const refresh = live ? null : h("button", { class: "button", testid: `${spec.kind}-refresh`, onclick: () => poller.now() }, "Refresh");

  const project = h("input", { type: "text", value: parent.project, name: "project", testid: `${spec.kind}-project`, title: "Project" });
  const location = h("input", { type: "text", value: parent.location, name: "location", testid: `${spec.kind}-location`, title: "Location" });
  for (const input of [project, location]) {
    input.addEventListener("change", () => {
      parent = { project: project.value.trim() || "default", location: location.value.trim() || "local" };
      tokens = [];
      pageToken = "";
      replaceHash(spec.href(parent));
      poller.now();
    });
  }

  function go(direction: 1 | -1): void {
    if (direction === 1 && nextToken) {
      tokens.push(pageToken);
      pageToken = nextToken;
    } else if (direction === -1 && tokens.length) {
      pageToken = tokens.pop() ?? "";
    } else return;
    poller.now();
  }

  function render(items: T[]): void {
    const rows = items.map((item) => spec.row(item, parent));
    replace(
      table,
      h("thead", {}, h("tr", {}, spec.columns.map((label) => h("th", {}, label)))),
      h("tbody", {}, rows),
    );
    body.hidden = rows.length === 0;
  }

  /** One refresh; answers whether to keep refreshing (a resource on the page is still going). */
  async function load(): Promise<boolean> {
    try {
      const page = await session.api.get<P>(spec.path(parent), { pageSize: PAGE_SIZE, pageToken }, scope.signal);
      const items = [...spec.items(page)].sort((a, b) => (spec.sortTime(b) ?? "").localeCompare(spec.sortTime(a) ?? ""));
      errorSlot.replaceChildren();
      nextToken = page.nextPageToken ?? "";
      render(items);
      prev.disabled = tokens.length === 0;
      next.disabled = !nextToken;
      if (items.length === 0 && tokens.length === 0) {
        replace(
          errorSlot,
          h(
            "div",
            { class: "empty", testid: `${spec.kind}-empty` },
            `No ${spec.title.toLowerCase()} in projects/${parent.project}/locations/${parent.location} yet. `,
            ...spec.empty(parent),
          ),
        );
      }
      const going = spec.live ? items.filter(spec.live.going).length : 0;
      status.textContent = `${items.length} ${spec.noun} on this page${going ? `, ${going} not ended` : ""}`;
      return going > 0;
    } catch (error) {
      if (scope.disposed) return false;
      render([]);
      status.textContent = "";
      replace(errorSlot, trainingErrorNotice(error));
      throw error;
    }
  }

  const poller = new Poller(scope, load, live?.onState);
  poller.now();
  if (live) {
    // Created or changed elsewhere: its run changes too (run-registry mirrors each of these).
    const nudge = new Throttle(() => poller.now(), 2000);
    scope.add(() => nudge.stop());
    watch(session.api, "/v1/machineLearningRuns:watch", scope, {
      onUpdate: (update) => {
        if (update.kind === "run") nudge.trigger();
      },
      onResync: () => nudge.trigger(),
    });
  }

  return h(
    "div",
    { class: spec.pageClass },
    h(
      "div",
      { class: "page-head" },
      h("h2", {}, spec.title),
      live?.el,
      h("span", { class: "spacer" }),
      h("label", { class: "inline" }, "project ", project),
      h("label", { class: "inline" }, "location ", location),
      refresh,
    ),
    errorSlot,
    body,
    h("div", { class: "pager" }, status, h("span", { class: "spacer" }), prev, next),
  );
}

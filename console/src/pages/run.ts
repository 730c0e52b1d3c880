// A run: its header (state, times, hosts, goodput, share) and tabs, live while shown.
// The same page serves a signed-in user (#/runs/<id>/...) and a shared run (#/share/<token>/...).

import { formatDuration, formatTime, percent, secondsBetween } from "../format";
import { h, replace } from "../h";
import { parseJobName } from "../jobs";
import { runPath } from "../paths";
import { jobHref, type Route, type Tab } from "../router";
import { Scope } from "../scope";
import type { Session } from "../session";
import { runResource, shareButton } from "../share";
import { watch } from "../sse";
import { Throttle } from "../throttle";
import type { GoodputResponse, ProcessHeartbeat, Run, RunUpdate } from "../types";
import { errorBox, labelChips, stateBadge } from "../ui";
import { configsTab } from "./configs";
import { eventsTab } from "./events";
import { logsPanel } from "./logs";
import { metricsTab } from "./metrics";
import { overviewTab } from "./overview";
import { profilesTab } from "./profiles";

/** What a tab gets: the run, the caller, where links go, and the live updates. */
export interface RunView {
  session: Session;
  runId: string;
  /** `#/runs/<id>` or `#/share/<token>`: tabs are `<base>/<tab>`. */
  base: string;
  run: () => Run | null;
  /** Subscribe to the run's live updates for the lifetime of `scope`. */
  onUpdate: (scope: Scope, listener: (update: RunUpdate | null) => void) => void;
  /**
   * The tab's first content is in (a tab that loads a lot says so; the others are taken as
   * in at once): the header's secondary reads (heartbeats, goodput) wait for it, so they do
   * not hold up what the user came to see on a busy registry.
   */
  settled: () => void;
}

/** The header's secondary reads wait at most this long for the tab to settle. */
export const DETAILS_WAIT_MS = 1500;

/** Tabs that call `view.settled()` themselves once their first content is in. */
const SETTLING_TABS: ReadonlySet<Tab> = new Set(["metrics"]);

export { runPath } from "../paths";

export function tabHref(view: Pick<RunView, "base">, tab: Tab, query?: Record<string, string>): string {
  const href = tab === "overview" ? view.base : `${view.base}/${tab}`;
  const params = new URLSearchParams(query ?? {}).toString();
  return params ? `${href}?${params}` : href;
}

const TAB_LABELS: [Tab, string][] = [
  ["overview", "Overview"],
  ["metrics", "Metrics"],
  ["configs", "Configs"],
  ["events", "Events"],
  ["profiles", "Profiles"],
];

const TAB_RENDERERS: Record<Tab, (view: RunView, scope: Scope, query: URLSearchParams) => HTMLElement> = {
  overview: overviewTab,
  metrics: metricsTab,
  configs: configsTab,
  // the run's log lines beside its events: the evidence next to what was detected
  events: (view, scope, query) => h("div", { class: "events-with-logs" }, eventsTab(view, scope, query), logsPanel(view, scope, query)),
  profiles: profilesTab,
};

export interface RunPage {
  el: HTMLElement;
  /** Show another tab of the same run without rebuilding the header; false if not ours. */
  update: (route: Route) => boolean;
}

export interface HeaderOptions {
  /** Heartbeats and goodput (a share link to one event or session cannot read them). */
  details: boolean;
  /** The first heartbeats and goodput reads wait for this (the run itself never does). */
  detailsAfter?: Promise<void>;
}

/** The run header alone, refreshed by `refresh()`. */
export function runHeader(
  session: Session,
  runId: string,
  scope: Scope,
  options: HeaderOptions,
  onRun: (run: Run) => void = () => {},
): { el: HTMLElement; refresh: () => void } {
  const el = h("header", { class: "run-header", testid: "run-header" }, h("div", { class: "muted" }, "loading…"));
  let lastGood: HTMLElement | null = null;

  // Until the tab has settled, the run alone: its details follow (see RunView.settled).
  let detailsWait: Promise<void> | null = options.details ? (options.detailsAfter ?? null) : null;
  let heartbeatsShown: ProcessHeartbeat[] | null = null;
  let goodputShown: GoodputResponse | null = null;

  async function load(): Promise<void> {
    const api = session.api;
    const details = options.details && detailsWait === null;
    const [run, heartbeats, goodput] = await Promise.allSettled([
      api.get<Run>(runPath(runId), {}, scope.signal),
      details ? api.get<{ heartbeats: ProcessHeartbeat[] }>(runPath(runId, "/heartbeats"), {}, scope.signal) : Promise.reject(new Error("not shown")),
      details ? api.get<GoodputResponse>(runPath(runId, ":goodput"), {}, scope.signal) : Promise.reject(new Error("not shown")),
    ]);
    if (scope.disposed) return;
    if (run.status === "rejected") {
      replace(el, errorBox(run.reason), lastGood);
      return;
    }
    onRun(run.value);
    if (details) {
      heartbeatsShown = heartbeats.status === "fulfilled" ? heartbeats.value.heartbeats : null;
      goodputShown = goodput.status === "fulfilled" ? goodput.value : null;
    }
    lastGood = render(run.value, heartbeatsShown, goodputShown);
    replace(el, lastGood);
    const wait = detailsWait;
    if (wait) {
      detailsWait = null;
      // not through the throttle: its 2 s spacing would hold the details back further
      void wait.then(() => load()).catch(() => undefined);
    }
  }

  function render(run: Run, heartbeats: ProcessHeartbeat[] | null, goodput: GoodputResponse | null): HTMLElement {
    const hosts = heartbeats ? [...new Map(heartbeats.map((hb) => [hb.host, hb])).values()] : null;
    const ended = run.endTime !== null;
    return h(
      "div",
      { class: "run-header-body", dataset: { runId: run.runId, state: run.state } },
      h(
        "div",
        { class: "run-title" },
        h("h2", { testid: "run-name" }, run.displayName || run.runId),
        stateBadge(run.state),
        h("span", { class: "chip runset", title: "Run set", testid: "run-set" }, run.runSet),
        labelChips(run.labels),
        h("span", { class: "spacer" }),
        shareButton(session, runResource(run.runId), "run"),
      ),
      h(
        "div",
        { class: "facts" },
        fact("Run id", h("code", {}, run.runId)),
        session.shared ? null : jobLink(run.workloadId),
        fact("Created", formatTime(run.createTime)),
        fact(ended ? "Ended" : "Updated", formatTime(ended ? run.endTime : run.updateTime)),
        fact(ended ? "Duration" : "Running for", formatDuration(secondsBetween(run.createTime, run.endTime))),
        hosts &&
          fact(
            `Hosts (${hosts.length})`,
            h(
              "span",
              { class: "chips", testid: "hosts" },
              hosts.length === 0
                ? h("span", { class: "muted" }, "no heartbeats")
                : hosts.map((hb) =>
                    h(
                      "span",
                      {
                        class: `chip host${hb.overdue ? " overdue" : ""}`,
                        title: `process ${hb.processIndex}, pid ${hb.pid}, step ${hb.step ?? "—"}, last seen ${formatTime(hb.lastSeenTime)}${hb.overdue ? " (overdue)" : ""}`,
                      },
                      hb.host || "(no host)",
                    ),
                  ),
            ),
          ),
        goodput &&
          fact(
            "Goodput",
            h(
              "span",
              { class: "goodput", testid: "goodput", title: goodputTitle(goodput) },
              h("span", { class: "meter" }, h("i", { style: `width:${(goodput.goodput * 100).toFixed(1)}%` })),
              percent(goodput.goodput),
            ),
          ),
      ),
      run.errorDetails && run.state === "STATE_FAILED"
        ? h("div", { class: "run-error" }, h("b", {}, run.errorDetails.code ?? run.errorDetails.reason ?? "failed"), " ", run.errorDetails.message)
        : null,
    );
  }

  const throttle = new Throttle(() => load(), 2000);
  scope.add(() => throttle.stop());
  throttle.trigger();
  return { el, refresh: () => throttle.trigger() };
}

function goodputTitle(goodput: GoodputResponse): string {
  const lost = goodput.buckets
    .filter((b) => b.seconds > 0)
    .map((b) => `${b.kind.toLowerCase()}: ${formatDuration(b.seconds)}`)
    .join(", ");
  return `${formatDuration(goodput.productiveSeconds)} productive of ${formatDuration(goodput.wallSeconds)}${lost ? `; lost to ${lost}` : ""}`;
}

/** A training job's run links back to its job (the run's workload is the job's name). */
function jobLink(workloadId: string): HTMLElement | null {
  const job = parseJobName(workloadId ?? "");
  if (!job) return null;
  return fact("Training job", h("a", { href: jobHref(job.parent, job.jobId), testid: "run-job-link" }, job.jobId));
}

function fact(label: string, value: Node | string): HTMLElement {
  return h("div", { class: "fact" }, h("span", { class: "fact-label" }, label), h("span", { class: "fact-value" }, value));
}

export function runPage(
  session: Session,
  scope: Scope,
  runId: string,
  base: string,
  tab: Tab,
  query: URLSearchParams,
  onRun: (run: Run) => void = () => {},
): RunPage {
  let run: Run | null = null;
  const listeners = new Set<(update: RunUpdate | null) => void>();
  let settle = (): void => {};
  const settled = new Promise<void>((resolve) => {
    settle = resolve;
    const timer = setTimeout(resolve, DETAILS_WAIT_MS);
    scope.add(() => clearTimeout(timer));
  });
  const view: RunView = {
    session,
    runId,
    base,
    run: () => run,
    onUpdate: (tabScope, listener) => {
      listeners.add(listener);
      tabScope.add(() => listeners.delete(listener));
    },
    settled: () => settle(),
  };
  const header = runHeader(session, runId, scope, { details: true, detailsAfter: settled }, (value) => {
    run = value;
    onRun(value);
  });
  const live = h("span", { class: "live", testid: "live" });
  const nav = h(
    "nav",
    { class: "tabs", testid: "tabs" },
    TAB_LABELS.map(([name, label]) => h("a", { href: tabHref(view, name), dataset: { tab: name }, testid: `tab-${name}` }, label)),
    h("span", { class: "spacer" }),
    live,
  );
  const content = h("div", { class: "tab-content" });
  let tabScope: Scope | null = null;

  function show(next: Tab, nextQuery: URLSearchParams): void {
    tabScope?.dispose();
    tabScope = scope.child();
    for (const link of nav.querySelectorAll<HTMLAnchorElement>("a[data-tab]")) {
      link.classList.toggle("active", link.dataset["tab"] === next);
    }
    replace(content, TAB_RENDERERS[next](view, tabScope, nextQuery));
    if (!SETTLING_TABS.has(next)) view.settled();
  }

  show(tab, query);
  watch(session.api, runPath(runId, ":watch"), scope, {
    onUpdate: (update) => {
      if (update.runId && update.runId !== runId) return;
      header.refresh();
      for (const listener of listeners) listener(update);
    },
    onResync: () => {
      header.refresh();
      for (const listener of listeners) listener(null);
    },
    onState: (state) => {
      live.className = `live ${state}`;
      live.textContent = state === "live" ? "● live" : state === "connecting" ? "○ connecting" : "○ offline";
    },
  });

  return {
    el: h("div", { class: "page run-page", dataset: { runId } }, header.el, nav, content),
    update: (route) => {
      const same =
        (route.page === "run" && base === `#/runs/${encodeURIComponent(route.runId)}`) ||
        (route.page === "share" && base === `#/share/${encodeURIComponent(route.token)}`);
      if (!same || (route.page !== "run" && route.page !== "share")) return false;
      show(route.tab, route.query);
      return true;
    },
  };
}

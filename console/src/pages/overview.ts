// Overview tab: summary metrics, latest values, configs at a glance, open events.

import { formatDuration, formatJson, formatNumber, formatTime } from "../format";
import { h, replace } from "../h";
import type { Scope } from "../scope";
import { Throttle } from "../throttle";
import type { ConfigEntry, FlatConfigsResponse, LatestValue, Run, WorkloadEvent } from "../types";
import { card, empty, errorBox, loading, severityBadge } from "../ui";
import { runPath, tabHref, type RunView } from "./run";

export function overviewTab(view: RunView, scope: Scope, _query: URLSearchParams): HTMLElement {
  const summary = h("div", {}, loading());
  const latest = h("div", {}, loading());
  const configs = h("div", {}, loading());
  const events = h("div", {}, loading());
  const api = view.session.api;

  async function loadRun(): Promise<void> {
    try {
      const run = await api.get<Run>(runPath(view.runId), {}, scope.signal);
      replace(summary, summaryMetrics(run));
    } catch (error) {
      if (!scope.disposed) replace(summary, errorBox(error));
    }
  }

  async function loadLatest(): Promise<void> {
    try {
      const answer = await api.get<{ values: LatestValue[] }>(runPath(view.runId, "/metrics:latest"), {}, scope.signal);
      replace(latest, latestTable(answer.values));
    } catch (error) {
      if (!scope.disposed) replace(latest, errorBox(error));
    }
  }

  async function loadConfigs(): Promise<void> {
    try {
      const answer = await api.get<FlatConfigsResponse>(runPath(view.runId, "/configs"), {}, scope.signal);
      replace(configs, configsSummary(answer.entries, view));
    } catch (error) {
      if (!scope.disposed) replace(configs, errorBox(error));
    }
  }

  async function loadEvents(): Promise<void> {
    try {
      const answer = await api.get<{ events: WorkloadEvent[] }>(runPath(view.runId, "/monitoredEvents"), { pageSize: 100 }, scope.signal);
      replace(events, eventsSummary(answer.events, view));
    } catch (error) {
      if (!scope.disposed) replace(events, errorBox(error));
    }
  }

  const runs = new Throttle(loadRun);
  const latests = new Throttle(loadLatest);
  const eventsThrottle = new Throttle(loadEvents);
  scope.add(() => [runs, latests, eventsThrottle].forEach((t) => t.stop()));
  runs.trigger();
  latests.trigger();
  eventsThrottle.trigger();
  void loadConfigs();
  view.onUpdate(scope, (update) => {
    if (!update || update.kind === "run") runs.trigger();
    if (!update || update.kind === "metrics") latests.trigger();
    if (!update || update.kind === "events" || update.kind === "analyses") eventsThrottle.trigger();
    if (!update) void loadConfigs();
  });

  return h(
    "div",
    { class: "overview grid-3" },
    card("Summary metrics", summary),
    card("Events", events),
    card("Configs", configs),
    h("div", { class: "wide" }, card("Latest values", latest)),
  );
}

function summaryMetrics(run: Run): HTMLElement {
  const m = run.metrics ?? { avgStepTime: null, avgMfu: null, avgThroughput: null, avgLatency: null };
  const rows: [string, string][] = [
    ["Avg step time", m.avgStepTime == null ? "—" : formatDuration(m.avgStepTime)],
    ["Avg MFU", m.avgMfu == null ? "—" : `${formatNumber(m.avgMfu, 3)}%`],
    ["Avg throughput", m.avgThroughput == null ? "—" : `${formatNumber(m.avgThroughput)}/s`],
    ["Avg latency", m.avgLatency == null ? "—" : formatDuration(m.avgLatency)],
  ];
  return h(
    "div",
    { class: "stat-grid", testid: "summary-metrics" },
    rows.map(([label, value]) => h("div", { class: "stat" }, h("span", { class: "stat-value" }, value), h("span", { class: "stat-label" }, label))),
  );
}

function latestTable(values: LatestValue[]): HTMLElement {
  if (values.length === 0) return empty("No metrics recorded yet.");
  const byMetric = new Map<string, LatestValue[]>();
  for (const value of values) byMetric.set(value.name, [...(byMetric.get(value.name) ?? []), value]);
  return h(
    "table",
    { class: "table compact", testid: "latest-values" },
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", {}, "Metric"),
        h("th", { class: "num" }, "Value"),
        h("th", { class: "num" }, "Min"),
        h("th", { class: "num" }, "Max"),
        h("th", { class: "num" }, "Step"),
        h("th", {}, "Series"),
        h("th", {}, "Time"),
      ),
    ),
    h(
      "tbody",
      {},
      [...byMetric].map(([name, series]) => {
        const step = Math.max(...series.map((s) => s.step));
        const finite = series.map((s) => s.value).filter(Number.isFinite);
        const bad = series.length - finite.length;
        // One series: its value; several (hosts, devices): their mean, with the spread.
        const value = series.length === 1 ? (series[0]?.value ?? NaN) : finite.length ? finite.reduce((a, b) => a + b, 0) / finite.length : NaN;
        const spread = series.length > 1 && finite.length > 0;
        const time = series.map((s) => s.time).sort().at(-1) ?? null;
        return h(
          "tr",
          { dataset: { metric: name }, class: bad ? "bad" : "" },
          h("td", { class: "key" }, name),
          h("td", { class: "num", title: series.length > 1 ? "mean over the series" : "" }, formatNumber(value)),
          h("td", { class: "num muted" }, spread ? formatNumber(Math.min(...finite)) : ""),
          h("td", { class: "num muted" }, spread ? formatNumber(Math.max(...finite)) : ""),
          h("td", { class: "num" }, formatNumber(step)),
          h(
            "td",
            { class: "muted", title: series.map((s) => `${s.host}: ${formatNumber(s.value)}`).join("\n") },
            series.length === 1 ? series[0]?.host || "—" : `${series.length} series${bad ? `, ${bad} non-finite` : ""}`,
          ),
          h("td", { class: "muted" }, formatTime(time)),
        );
      }),
    ),
  );
}

function configsSummary(entries: ConfigEntry[], view: RunView): HTMLElement {
  if (entries.length === 0) return empty("No configs recorded.");
  const counts = { userConfigs: 0, softwareConfigs: 0, hardwareConfigs: 0 };
  for (const entry of entries) counts[entry.section]++;
  const shown = [...entries.filter((e) => e.section === "userConfigs"), ...entries.filter((e) => e.section === "hardwareConfigs")].slice(0, 14);
  return h(
    "div",
    { testid: "configs-summary" },
    h("p", { class: "muted" }, `${counts.userConfigs} user, ${counts.softwareConfigs} software, ${counts.hardwareConfigs} hardware keys · `, h("a", { href: tabHref(view, "configs") }, "all configs")),
    h(
      "table",
      { class: "table compact kv-table" },
      h(
        "tbody",
        {},
        shown.map((entry) => h("tr", {}, h("td", { class: "key" }, entry.key), h("td", { class: "value" }, formatJson(entry.value)))),
      ),
    ),
  );
}

function eventsSummary(events: WorkloadEvent[], view: RunView): HTMLElement {
  const open = events.filter((event) => event.state === "OPEN");
  return h(
    "div",
    {},
    h(
      "div",
      { class: "stat-grid" },
      h("div", { class: "stat" }, h("span", { class: `stat-value${open.length ? " warn" : ""}`, testid: "open-events" }, String(open.length)), h("span", { class: "stat-label" }, "open events")),
      h("div", { class: "stat" }, h("span", { class: "stat-value" }, String(events.length)), h("span", { class: "stat-label" }, "events in all")),
    ),
    events.length === 0
      ? empty("No events: nothing the monitors saw hurt this run.")
      : h(
          "ul",
          { class: "event-list compact" },
          events.slice(0, 6).map((event) =>
            h(
              "li",
              {},
              severityBadge(event.severity),
              " ",
              h("a", { href: tabHref(view, "events", { event: event.eventId }) }, event.displayName || event.type),
              h("span", { class: "muted" }, ` · ${event.state.toLowerCase()} · ${formatTime(event.startTime)}`),
            ),
          ),
        ),
  );
}

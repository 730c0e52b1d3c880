// Metrics tab: every metric of the run as a chart, in sections (model quality, model
// performance, system, other); x by step or time; one line or one per host; smoothing and a
// log y axis for every chart at once (in the URL; smoothing also remembered); live.

import { ApiError } from "../api";
import { type ChartLine, type LoadRequest, lineColor, MetricChart, type XMode } from "../chart";
import { classify, compareNames, SECTIONS, type Section } from "../classify";
import { h, replace } from "../h";
import { replaceHash } from "../router";
import { lookControls } from "../look";
import { type ChartRead, chartReadUrl } from "../paths";
import { takeEarlyChart } from "../prefetch";
import type { Scope } from "../scope";
import { Throttle } from "../throttle";
import type { DownsampleMetricResponse, GroupBy, MetricSummary } from "../types";
import { empty, errorBox, loading } from "../ui";
import { runPath, tabHref, type RunView } from "./run";

const marked = new Set<string>();

/** A performance mark, the first time only (the first visit's timeline). */
function markOnce(name: string): void {
  if (marked.has(name)) return;
  marked.add(name);
  performance.mark(name);
}

export function metricsTab(view: RunView, scope: Scope, query: URLSearchParams): HTMLElement {
  let xMode: XMode = query.get("x") === "time" ? "time" : "step";
  let groupBy: GroupBy = query.get("hosts") === "1" ? "host" : "none";
  const look = lookControls(query, (next) => {
    syncControls();
    charts.forEach((chart) => chart.setLook(next));
  });
  const charts = new Map<string, MetricChart>();
  const hostColors = new Map<string, string>();
  scope.add(() => charts.forEach((chart) => chart.dispose()));

  const status = h("div");
  const sections = new Map<Section, { el: HTMLElement; grid: HTMLElement }>();
  const body = h("div", { class: "metric-sections" });
  for (const [section, title] of SECTIONS) {
    const grid = h("div", { class: "chart-grid" });
    const el = h(
      "details",
      { class: "metric-section", testid: "metric-section", dataset: { section } },
      h("summary", {}, h("h3", {}, title), h("span", { class: "count muted" })),
      grid,
    );
    (el as HTMLDetailsElement).open = true;
    el.hidden = true;
    sections.set(section, { el, grid });
    body.append(el);
  }

  const search = h("input", {
    type: "search",
    placeholder: "Filter metrics",
    testid: "metric-filter",
    oninput: () => applyFilter(),
  });
  const xToggle = h("button", {
    class: "button toggle",
    testid: "x-axis-toggle",
    title: "Plot against step or wall-clock time",
    onclick: () => {
      xMode = xMode === "step" ? "time" : "step";
      syncControls();
      charts.forEach((chart) => chart.setXMode(xMode));
    },
  });
  const hostToggle = h("input", {
    type: "checkbox",
    testid: "per-host-toggle",
    checked: groupBy === "host",
    onchange: () => {
      groupBy = hostToggle.checked ? "host" : "none";
      syncControls();
      charts.forEach((chart, name) => chart.setLoader(loader(name)));
    },
  });

  function syncControls(): void {
    xToggle.textContent = xMode === "step" ? "x: step" : "x: time";
    xToggle.dataset["mode"] = xMode;
    xToggle.setAttribute("aria-pressed", String(xMode === "time"));
    const params: Record<string, string> = look.params();
    if (xMode === "time") params["x"] = "time";
    if (groupBy === "host") params["hosts"] = "1";
    replaceHash(tabHref(view, "metrics", params));
  }

  function colorOf(host: string | null, index: number, lines: number): string {
    if (lines === 1 || host === null) return lineColor(0);
    let color = hostColors.get(host);
    if (!color) {
      color = lineColor(hostColors.size);
      hostColors.set(host, color);
    }
    return color ?? lineColor(index);
  }

  function loader(name: string) {
    const grouping = groupBy;
    return async (request: LoadRequest): Promise<ChartLine[]> => {
      const api = view.session.api;
      const read: ChartRead = {
        buckets: request.buckets,
        groupBy: grouping,
        startStep: request.range?.startStep,
        endStep: request.range?.endStep,
        withTimes: request.withTimes,
      };
      // the read index.html's script made once the metric list was in, when it serves
      const early = takeEarlyChart(view.runId, name, read, api.token);
      const answer = early
        ? await api.answer<DownsampleMetricResponse>(early, request.signal)
        : await api.get<DownsampleMetricResponse>(chartReadUrl(view.runId, name, read), {}, request.signal);
      const lines = answer.series;
      return lines.map((series, i) => ({
        label: grouping === "host" ? series.host || "(no host)" : name,
        color: colorOf(grouping === "host" ? series.host : null, i, lines.length),
        buckets: series.buckets,
      }));
    };
  }

  function applyFilter(): void {
    const text = search.value.trim().toLowerCase();
    const visibleBySection = new Map<Section, number>();
    for (const [name, chart] of charts) {
      const show = !text || name.toLowerCase().includes(text);
      chart.el.hidden = !show;
      if (show) {
        const section = classify(name);
        visibleBySection.set(section, (visibleBySection.get(section) ?? 0) + 1);
      }
    }
    for (const [section, { el }] of sections) {
      const count = visibleBySection.get(section) ?? 0;
      el.hidden = count === 0;
      const counter = el.querySelector(".count");
      if (counter) counter.textContent = `${count}`;
    }
  }

  function render(metrics: MetricSummary[]): void {
    const names = metrics.map((m) => m.name).sort(compareNames);
    for (const name of names) {
      if (!charts.has(name)) {
        charts.set(
          name,
          // the first chart drawn settles the tab: the run header's details may load then
          new MetricChart({ metric: name, loader: loader(name), xMode, ...look.look(), csvName: view.runId, onDraw: () => view.settled() }),
        );
      }
    }
    for (const [section, { grid }] of sections) {
      const mine = names.filter((name) => classify(name) === section);
      grid.replaceChildren(...mine.map((name) => charts.get(name)?.el).filter((el): el is HTMLDivElement => !!el));
    }
    status.replaceChildren();
    applyFilter();
    // placed and unhidden: those in view load now rather than on the observer's next frame
    MetricChart.startVisible(charts.values());
    if (names.length === 0) {
      status.append(empty("No metrics recorded yet."));
      view.settled();
    }
  }

  async function loadList(): Promise<void> {
    try {
      const answer = await view.session.api.get<{ metrics: MetricSummary[] }>(runPath(view.runId, "/metrics"), {}, scope.signal);
      markOnce("mldiag:metric-list"); // benchmarks/console_first_chart.py reads the marks
      render(answer.metrics);
      markOnce("mldiag:charts-placed");
    } catch (error) {
      if (scope.disposed) return;
      view.settled();
      if (error instanceof ApiError || error instanceof Error) replace(status, errorBox(error));
    }
  }

  const lister = new Throttle(loadList, 1000);
  scope.add(() => lister.stop());
  status.append(loading("loading metrics…"));
  lister.trigger();
  view.onUpdate(scope, (update) => {
    if (update === null) {
      lister.trigger();
      charts.forEach((chart) => chart.refresh());
      return;
    }
    if (update.kind !== "metrics") return;
    const named = update.metrics ?? [];
    if (named.length === 0) {
      charts.forEach((chart) => chart.refresh());
      lister.trigger();
      return;
    }
    for (const name of named) {
      const chart = charts.get(name);
      if (chart) chart.refresh();
      else lister.trigger(); // a new metric: list again
    }
  });
  syncControls();

  return h(
    "div",
    { class: "metrics-tab" },
    h(
      "div",
      { class: "toolbar" },
      search,
      xToggle,
      h("label", { class: "inline", title: "One line per host" }, hostToggle, " per host"),
      look.el,
      h("span", { class: "spacer" }),
      h("span", { class: "muted hint" }, "drag to zoom · double-click to reset"),
    ),
    status,
    body,
  );
}

// Compare runs: every metric they share as one chart with a line per run (smoothing and log y
// for all at once, in the URL), and how their configs differ from the first run's.

import { type ChartLine, type LoadRequest, lineColor, MetricChart } from "../chart";
import { classify, compareNames, SECTIONS } from "../classify";
import { formatJson } from "../format";
import { h, replace } from "../h";
import { lookControls } from "../look";
import { compareHref, replaceHash, runHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { mergeDiffs } from "../diff";
import type { ConfigDifference, ConfigsDiffResponse, DownsampleMetricResponse, MetricSummary, Run } from "../types";
import { empty, errorBox, loading, stateBadge } from "../ui";
import { runPath } from "./run";

export function comparePage(session: Session, scope: Scope, runIds: string[], query = new URLSearchParams()): HTMLElement {
  const page = h("div", { class: "page compare-page" }, h("div", { class: "page-head" }, h("h2", {}, "Compare runs")));
  if (runIds.length < 2) {
    page.append(empty("Pick two runs or more in the runs table to compare them."), h("a", { href: "#/runs" }, "← Runs"));
    return page;
  }
  const api = session.api;
  const runsSlot = h("div", { class: "compare-runs" }, loading());
  const chartsSlot = h("div", {}, loading("loading metrics…"));
  const diffSlot = h("div", {}, loading("loading configs…"));
  const unchanged = h("input", { type: "checkbox", testid: "show-unchanged", onchange: () => void loadDiff() });
  const charts = new Map<string, MetricChart>();
  scope.add(() => charts.forEach((chart) => chart.dispose()));
  let names = new Map<string, string>(runIds.map((id) => [id, id]));
  const colors = new Map(runIds.map((id, i) => [id, lineColor(i)]));
  const look = lookControls(query, (next) => {
    const params = new URLSearchParams(look.params()).toString();
    replaceHash(compareHref(runIds) + (params ? `&${params}` : ""));
    charts.forEach((chart) => chart.setLook(next));
  });

  page.append(
    runsSlot,
    h("section", { class: "card" }, h("div", { class: "card-head" }, h("h3", {}, "Configs"), h("span", { class: "spacer" }), h("label", { class: "inline" }, unchanged, " show unchanged")), diffSlot),
    h("div", { class: "toolbar" }, h("h3", {}, "Metrics"), look.el, h("span", { class: "spacer" }), h("span", { class: "muted hint" }, "drag to zoom · double-click to reset")),
    chartsSlot,
  );

  async function loadRuns(): Promise<void> {
    const results = await Promise.allSettled(runIds.map((id) => api.get<Run>(runPath(id), {}, scope.signal)));
    if (scope.disposed) return;
    const runs = results.map((result, i) => (result.status === "fulfilled" ? result.value : { runId: runIds[i] ?? "", error: result.reason as unknown }));
    names = new Map(runs.map((run) => [run.runId, "displayName" in run && run.displayName ? run.displayName : run.runId]));
    replace(
      runsSlot,
      h(
        "ul",
        { class: "compare-list", testid: "compare-runs" },
        runs.map((run) =>
          h(
            "li",
            { dataset: { runId: run.runId } },
            h("i", { class: "swatch", style: `background:${colors.get(run.runId) ?? "#999"}` }),
            h("a", { href: runHref(run.runId) }, names.get(run.runId) ?? run.runId),
            "state" in run ? stateBadge(run.state) : errorBox(run.error),
            "runSet" in run ? h("span", { class: "muted" }, run.runSet) : null,
          ),
        ),
      ),
    );
  }

  async function loadCharts(): Promise<void> {
    const lists = await Promise.allSettled(
      runIds.map((id) => api.get<{ metrics: MetricSummary[] }>(runPath(id, "/metrics"), {}, scope.signal)),
    );
    if (scope.disposed) return;
    const failed = lists.find((list) => list.status === "rejected");
    if (failed && failed.status === "rejected") {
      replace(chartsSlot, errorBox(failed.reason));
      return;
    }
    const sets = lists.map((list) => new Set(list.status === "fulfilled" ? list.value.metrics.map((m) => m.name) : []));
    const [first, ...rest] = sets;
    const common = [...(first ?? [])].filter((name) => rest.every((set) => set.has(name))).sort(compareNames);
    const all = new Set(sets.flatMap((set) => [...set]));
    if (common.length === 0) {
      replace(chartsSlot, empty("These runs have no metric in common."));
      return;
    }
    const sections = SECTIONS.map(([section, title]) => {
      const mine = common.filter((name) => classify(name) === section);
      if (mine.length === 0) return null;
      return h(
        "section",
        { class: "metric-section", testid: "metric-section", dataset: { section } },
        h("h3", {}, title),
        h(
          "div",
          { class: "chart-grid" },
          mine.map((name) => {
            const chart = new MetricChart({ metric: name, loader: loader(name), ...look.look(), csvName: "compare" });
            charts.set(name, chart);
            return chart.el;
          }),
        ),
      );
    });
    replace(
      chartsSlot,
      all.size > common.length ? h("p", { class: "muted" }, `${common.length} metric(s) in common; ${all.size - common.length} recorded by only some of the runs are left out.`) : null,
      sections,
    );
  }

  function loader(metric: string) {
    return async (request: LoadRequest): Promise<ChartLine[]> => {
      const answer = await api.get<DownsampleMetricResponse>(
        "/v1/machineLearningRuns:compareMetrics",
        {
          runs: runIds.join(","),
          metric,
          buckets: request.buckets,
          groupBy: "none",
          startStep: request.range?.startStep,
          endStep: request.range?.endStep,
        },
        request.signal,
      );
      return answer.series.map((s) => ({
        label: names.get(s.runId) ?? s.runId,
        color: colors.get(s.runId) ?? lineColor(0),
        buckets: s.buckets,
      }));
    };
  }

  async function loadDiff(): Promise<void> {
    const [base, ...others] = runIds;
    if (base === undefined) return;
    const results = await Promise.allSettled(
      others.map((other) =>
        api.get<ConfigsDiffResponse>("/v1/machineLearningRuns:diffConfigs", { base, other, includeUnchanged: unchanged.checked ? "true" : undefined }, scope.signal),
      ),
    );
    if (scope.disposed) return;
    const failed = results.find((r) => r.status === "rejected");
    if (failed && failed.status === "rejected") {
      replace(diffSlot, errorBox(failed.reason));
      return;
    }
    const diffs = results.map((r) => (r.status === "fulfilled" ? r.value.differences : []));
    replace(diffSlot, diffTable(runIds, names, diffs));
  }

  void loadRuns().then(() => Promise.all([loadCharts(), loadDiff()]));
  return page;
}

function diffTable(runIds: string[], names: Map<string, string>, diffs: ConfigDifference[][]): HTMLElement {
  const rows = mergeDiffs(diffs);
  if (rows.length === 0) return h("div", { testid: "configs-diff", class: "empty" }, "Same configs.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "table compact configs-diff", testid: "configs-diff" },
      h("thead", {}, h("tr", {}, h("th", {}, "Section"), h("th", {}, "Key"), runIds.map((id, i) => h("th", {}, names.get(id) ?? id, i === 0 ? h("span", { class: "sub" }, "base") : null)))),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h(
            "tr",
            { dataset: { key: row.key, section: row.section } },
            h("td", { class: "muted" }, row.section.replace("Configs", "")),
            h("td", { class: "key" }, row.key),
            row.values.map((value, i) =>
              h("td", { class: `value${row.changed[i] ? " changed" : ""}${value === undefined ? " absent" : ""}` }, value === undefined ? "—" : formatJson(value)),
            ),
          ),
        ),
      ),
    ),
  );
}

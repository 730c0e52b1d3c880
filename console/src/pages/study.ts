// A hyperparameter tuning job (a study): its header (state, objective, trials, best), the
// objective over trials with the best so far, the parallel coordinates of every trial, and the
// trials table (state, stopped early, parameters, final value, links to each trial's custom
// job and run), from which trials are picked to compare their runs. Refreshed every 2 s until
// the study reaches a terminal state.

import { formatDuration, formatNumber, formatTime, secondsBetween } from "../format";
import { h, replace } from "../h";
import { isTerminal } from "../jobs";
import { compareHref, jobHref, parentOf, replaceHash, runHref, tuningJobHref, tuningJobsHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { objectiveModel, parallelModel } from "../trialplots";
import {
  bestTrial,
  byTrialId,
  flattenParameters,
  formatParameter,
  goalOf,
  type HyperparameterTuningJob,
  objectiveValue,
  parameterKind,
  parameterValue,
  scaleOf,
  stoppedEarly,
  type Trial,
  trialCounts,
  trialJobId,
  trialState,
  tuningJobPath,
} from "../tuning";
import { facts, labelChips } from "../ui";
import { jobStateBadge, liveMark, Poller, trainingErrorNotice } from "./jobparts";
import { objectivePlot, parallelPlot } from "./studyplots";

export function studyPage(session: Session, scope: Scope, jobId: string, query: URLSearchParams): HTMLElement {
  const parent = parentOf(query);
  let job: HyperparameterTuningJob | null = null;
  let metricId = query.get("metric") ?? "";
  // A log objective axis (y=log in the URL, as on a run's metrics): a diverged trial's 1e35
  // otherwise flattens every other trial against the bottom.
  let logScale = query.get("y") === "log";
  const selected = new Set<string>();

  const header = h("header", { class: "run-header standalone job-header study-header", testid: "study-header" }, h("div", { class: "muted" }, "loading…"));
  const errorSlot = h("div");
  const objectiveSlot = h("div", { class: "plot-wrap" });
  const parallelSlot = h("div", { class: "plot-wrap" });
  const trialsTable = h("table", { class: "table trials-table", testid: "trials-table" });
  const compare = h("a", { class: "button primary disabled", testid: "compare-trials", href: "#/compare" }, "Compare selected trials");
  const selection = h("span", { class: "muted hint", testid: "trials-selected" });
  const live = liveMark("Refreshed every 2 s until the study ends", "");
  const metricSelect = h("select", { testid: "objective-metric", title: "The metric the plots and the table's value follow" });
  const syncHash = (): void => replaceHash(tuningJobHref(parent, jobId, { metric: metricId, ...(logScale ? { y: "log" } : {}) }));
  metricSelect.addEventListener("change", () => {
    metricId = metricSelect.value;
    syncHash();
    render();
  });
  const logToggle = h("input", {
    type: "checkbox",
    testid: "study-log-scale",
    checked: logScale,
    onchange: () => {
      logScale = logToggle.checked;
      syncHash();
      render();
    },
  });
  const logControl = h("label", { class: "inline", title: "Objective on a log axis (values ≤ 0 are not drawn)" }, logToggle, " log");

  const body = h(
    "div",
    { class: "study-body" },
    h(
      "div",
      { class: "study-grid" },
      h(
        "section",
        { class: "card" },
        h("div", { class: "card-head" }, h("h3", {}, "Objective over trials"), h("span", { class: "spacer" }), logControl, metricSelect),
        objectiveSlot,
        h(
          "div",
          { class: "legend muted hint" },
          h("span", {}, h("i", { class: "dot" }), " final value"),
          h("span", {}, h("i", { class: "dot hollow" }), " stopped early"),
          h("span", {}, h("i", { class: "dash best" }), " best so far"),
        ),
      ),
      h(
        "section",
        { class: "card" },
        h("div", { class: "card-head" }, h("h3", {}, "Parallel coordinates"), h("span", { class: "spacer" }), h("span", { class: "muted hint ramp-legend" }, "worst ", h("i", { class: "ramp" }), " best · grey: no value")),
        parallelSlot,
      ),
    ),
    h(
      "section",
      { class: "card" },
      h("div", { class: "card-head" }, h("h3", {}, "Trials"), h("span", { class: "spacer" }), selection, compare),
      h("div", { class: "table-wrap" }, trialsTable),
    ),
  );
  body.hidden = true;

  function toggle(trialId: string): void {
    if (selected.has(trialId)) selected.delete(trialId);
    else selected.add(trialId);
    render();
  }

  function objective(current: HyperparameterTuningJob): { metricId: string; goal: ReturnType<typeof goalOf> } | null {
    const metrics = current.studySpec?.metrics ?? [];
    const metric = metrics.find((m) => m.metricId === metricId) ?? metrics[0];
    return metric ? { metricId: metric.metricId, goal: goalOf(metric) } : null;
  }

  function renderHeader(current: HyperparameterTuningJob): void {
    const counts = trialCounts(current);
    const chosen = objective(current);
    const best = chosen ? bestTrial(current.trials ?? [], chosen.metricId, chosen.goal) : null;
    const ended = Boolean(current.endTime);
    const spec = current.studySpec;
    replace(
      header,
      h(
        "div",
        { class: "run-header-body", dataset: { jobId, state: current.state } },
        h(
          "div",
          { class: "run-title" },
          h("h2", { testid: "study-name" }, current.displayName || jobId),
          jobStateBadge(current.state),
          labelChips(current.labels ?? {}),
          h("span", { class: "spacer" }),
          h("a", { class: "button", href: runHref(jobId), testid: "study-run-link" }, "Study run"),
        ),
        facts([
          ["Job id", h("code", {}, jobId)],
          ["Objective", chosen ? `${chosen.metricId} (${chosen.goal === "MINIMIZE" ? "minimize" : "maximize"})` : null],
          ["Algorithm", algorithmName(spec?.algorithm)],
          ["Trials", h("span", { testid: "study-trials", dataset: { done: counts.done, total: counts.total } }, `${counts.done} / ${counts.total} done`, counts.running ? `, ${counts.running} running` : "", ` · ${current.parallelTrialCount} at a time`)],
          ["Best", best ? h("span", { testid: "study-best", dataset: { value: best.value, trialId: best.trial.id } }, formatNumber(best.value), h("span", { class: "muted" }, ` trial ${best.trial.id}`)) : null],
          ["Early stopping", spec?.medianAutomatedStoppingSpec ? "median" : "off"],
          ["Created", formatTime(current.createTime)],
          [ended ? "Ran for" : "Running for", current.startTime ? formatDuration(secondsBetween(current.startTime, current.endTime)) : "not started"],
        ]),
        current.error ? h("div", { class: "run-error", testid: "study-error" }, current.error.message ?? `code ${current.error.code}`) : null,
      ),
    );
    const metrics = spec?.metrics ?? [];
    metricSelect.hidden = metrics.length < 2;
    if (metricSelect.options.length !== metrics.length) {
      replace(metricSelect, metrics.map((m) => h("option", { value: m.metricId }, `${m.metricId} (${goalOf(m) === "MINIMIZE" ? "min" : "max"})`)));
    }
    if (chosen) metricSelect.value = chosen.metricId;
  }

  function renderTrials(current: HyperparameterTuningJob): void {
    const chosen = objective(current);
    const specs = flattenParameters(current.studySpec?.parameters ?? []);
    const trials = [...(current.trials ?? [])].sort(byTrialId);
    const best = chosen ? bestTrial(trials, chosen.metricId, chosen.goal) : null;
    const rows = trials.map((trial) => trialRow(trial, specs.map((spec) => spec.parameterId), chosen?.metricId ?? "", best?.trial.id === trial.id));
    replace(
      trialsTable,
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { class: "check" }),
          h("th", {}, "Trial"),
          h("th", {}, "State"),
          specs.map((spec) => h("th", { class: "num", title: `${parameterKind(spec).toLowerCase()}${parameterKind(spec) === "CATEGORICAL" ? "" : `, ${scaleOf(spec).replace("_", " ")} scale`}` }, spec.parameterId)),
          h("th", { class: "num" }, chosen ? `${chosen.metricId} (final)` : "Final value"),
          h("th", { class: "num" }, "Step"),
          h("th", {}, "Ran for"),
          h("th", {}, "Custom job / run"),
        ),
      ),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colSpan: specs.length + 7, class: "empty" }, "No trial yet (the study suggests its first trials when it starts)."))),
    );
  }

  function trialRow(trial: Trial, parameterIds: string[], metric: string, isBest: boolean): HTMLElement {
    const state = trialState(trial);
    const runId = trialJobId(trial);
    const value = metric ? objectiveValue(trial, metric) : null;
    const checkbox = h("input", {
      type: "checkbox",
      testid: "trial-select",
      checked: selected.has(trial.id),
      disabled: !runId,
      title: runId ? "Pick to compare" : "This trial has no run yet",
      onchange: () => toggle(trial.id),
    });
    const row = h(
      "tr",
      { class: `${isBest ? "best " : ""}${selected.has(trial.id) ? "picked" : ""}`, dataset: { trialId: trial.id, state, runId: runId ?? undefined } },
      h("td", { class: "check" }, checkbox),
      h("td", { class: "key" }, trial.id),
      h(
        "td",
        {},
        h("span", { class: `badge trial-${state.toLowerCase()}`, testid: "trial-state" }, state),
        stoppedEarly(trial) ? h("span", { class: "badge stopped-early", testid: "stopped-early", title: "Median stopping ended this trial" }, "stopped early") : null,
        trial.infeasibleReason ? h("span", { class: "sub", testid: "infeasible-reason" }, trial.infeasibleReason) : null,
      ),
      parameterIds.map((id) => h("td", { class: "num value", dataset: { parameter: id } }, formatParameter(parameterValue(trial, id)))),
      h("td", { class: "num value", testid: "trial-value" }, value === null ? "—" : formatNumber(value), isBest ? h("span", { class: "badge best-badge", testid: "best-trial" }, "best") : null),
      h("td", { class: "num" }, trial.finalMeasurement?.stepCount ?? "—"),
      h("td", {}, trial.startTime ? formatDuration(secondsBetween(trial.startTime, trial.endTime)) : "—"),
      h(
        "td",
        { class: "links" },
        runId
          ? [
              h("a", { href: jobHref(parent, runId), testid: "trial-job-link", title: "The trial's custom job" }, runId),
              " · ",
              h("a", { href: runHref(runId), testid: "trial-run-link", title: "The trial's run" }, "run"),
              " · ",
              h("a", { href: runHref(runId, "metrics"), title: "The trial's run: metrics" }, "metrics"),
            ]
          : "—",
      ),
    );
    row.addEventListener("mouseenter", () => highlight(trial.id, true));
    row.addEventListener("mouseleave", () => highlight(trial.id, false));
    return row;
  }

  function highlight(trialId: string, on: boolean): void {
    for (const el of body.querySelectorAll(`svg [data-trial-id="${CSS.escape(trialId)}"]`)) el.classList.toggle("hover", on);
  }

  function renderSelection(current: HyperparameterTuningJob): void {
    const runs = [...(current.trials ?? [])]
      .sort(byTrialId)
      .filter((trial) => selected.has(trial.id))
      .map(trialJobId)
      .filter((id): id is string => id !== null);
    compare.href = compareHref(runs);
    compare.classList.toggle("disabled", runs.length < 2);
    compare.setAttribute("aria-disabled", String(runs.length < 2));
    compare.dataset["runs"] = runs.join(",");
    selection.textContent = runs.length ? `${runs.length} picked` : "pick two trials or more";
  }

  function render(): void {
    const current = job;
    if (!current) return;
    renderHeader(current);
    const chosen = objective(current);
    if (chosen) {
      const options = { goal: chosen.goal, metricId: chosen.metricId, selected, onPick: toggle };
      replace(objectiveSlot, objectivePlot(objectiveModel(current, chosen.metricId, chosen.goal, logScale), options));
      replace(parallelSlot, parallelPlot(parallelModel(current, chosen.metricId, chosen.goal, logScale), options));
    }
    renderTrials(current);
    renderSelection(current);
  }

  compare.addEventListener("click", (event) => {
    if (compare.classList.contains("disabled")) event.preventDefault();
  });

  async function load(): Promise<boolean> {
    try {
      job = await session.api.get<HyperparameterTuningJob>(tuningJobPath(parent, jobId), {}, scope.signal);
    } catch (error) {
      if (scope.disposed) return false;
      if (job === null) header.hidden = true;
      replace(errorSlot, trainingErrorNotice(error), h("a", { href: tuningJobsHref(parent) }, "← Tuning jobs"));
      throw error;
    }
    if (scope.disposed) return false;
    replace(errorSlot);
    header.hidden = false;
    body.hidden = false;
    render();
    return !isTerminal(job.state);
  }

  const poller = new Poller(scope, load, live.onState);
  poller.now();

  return h(
    "div",
    { class: "page study-page", dataset: { jobId } },
    h("div", { class: "page-head" }, h("a", { href: tuningJobsHref(parent) }, "← Tuning jobs"), h("span", { class: "spacer" }), live.el),
    errorSlot,
    header,
    body,
  );
}

function algorithmName(algorithm: string | number | undefined): string {
  if (algorithm === "GRID_SEARCH" || algorithm === 2) return "grid search";
  if (algorithm === "RANDOM_SEARCH" || algorithm === 3) return "random search";
  return "default (Bayesian-style)";
}

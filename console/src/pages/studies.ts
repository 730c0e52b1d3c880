// The hyperparameter tuning jobs (studies) of a project and location: state, name, trials done
// out of the most asked for, the best value of the objective. Refreshed every 2 s while any
// study on the page has not ended, and when the runs stream says a run changed (a study is a
// run, and so is each trial).

import { formatTime } from "../format";
import { h, replace } from "../h";
import { isTerminal, trainingUnavailable } from "../jobs";
import { navigate, parentOf, type Parent, replaceHash, runHref, tuningJobHref, tuningJobsHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { watch } from "../sse";
import { Throttle } from "../throttle";
import {
  bestTrial,
  formatParameter,
  type HyperparameterTuningJob,
  type ListHyperparameterTuningJobsResponse,
  primaryMetric,
  trialCounts,
  tuningJobIdOf,
  tuningJobsPath,
} from "../tuning";
import { errorBox, labelChips } from "../ui";
import { jobStateBadge, Poller, unavailableNotice } from "./jobparts";

const PAGE_SIZE = 50;

export function studiesPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  let parent: Parent = parentOf(query);
  let tokens: string[] = [];
  let pageToken = "";
  let nextToken = "";

  const table = h("table", { class: "table jobs-table studies-table", testid: "studies-table" });
  const body = h("div", { class: "table-wrap" }, table);
  const errorSlot = h("div");
  const status = h("div", { class: "table-status", testid: "studies-status" });
  const live = h("span", { class: "live", testid: "live", title: "Refreshed every 2 s while a study on this page runs" });
  const prev = h("button", { class: "button", testid: "prev-page", onclick: () => go(-1) }, "‹ Prev");
  const next = h("button", { class: "button", testid: "next-page", onclick: () => go(1) }, "Next ›");

  const project = h("input", { type: "text", value: parent.project, name: "project", testid: "studies-project", title: "Project" });
  const location = h("input", { type: "text", value: parent.location, name: "location", testid: "studies-location", title: "Location" });
  for (const input of [project, location]) {
    input.addEventListener("change", () => {
      parent = { project: project.value.trim() || "default", location: location.value.trim() || "local" };
      tokens = [];
      pageToken = "";
      replaceHash(tuningJobsHref(parent));
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

  function render(jobs: HyperparameterTuningJob[]): void {
    const rows = jobs.map((job) => {
      const jobId = tuningJobIdOf(job);
      const href = tuningJobHref(parent, jobId);
      const counts = trialCounts(job);
      const objective = primaryMetric(job.studySpec);
      const best = objective ? bestTrial(job.trials ?? [], objective.metricId, objective.goal) : null;
      return h(
        "tr",
        {
          class: "clickable",
          dataset: { jobId, state: job.state },
          onclick: (event) => {
            if ((event.target as HTMLElement).closest("a, button")) return;
            navigate(href);
          },
        },
        h("td", {}, jobStateBadge(job.state)),
        h("td", { class: "name" }, h("a", { href, testid: "study-link" }, job.displayName || jobId), h("span", { class: "sub" }, jobId)),
        h(
          "td",
          { class: "num", testid: "study-trials", dataset: { done: counts.done, total: counts.total } },
          `${counts.done} / ${counts.total}`,
          counts.running ? h("span", { class: "sub" }, `${counts.running} running`) : null,
          counts.infeasible ? h("span", { class: "sub" }, `${counts.infeasible} infeasible`) : null,
        ),
        h(
          "td",
          { class: "num", testid: "study-best", dataset: best ? { value: best.value, trialId: best.trial.id } : {} },
          best ? formatParameter(best.value) : "—",
          objective ? h("span", { class: "sub" }, `${objective.metricId} · ${objective.goal === "MINIMIZE" ? "min" : "max"}${best ? ` · trial ${best.trial.id}` : ""}`) : null,
        ),
        h("td", { title: job.createTime ?? "" }, formatTime(job.createTime)),
        h("td", {}, labelChips(job.labels ?? {})),
        h("td", { class: "links" }, h("a", { href: runHref(jobId), title: "The study's run" }, "run")),
      );
    });
    replace(
      table,
      h("thead", {}, h("tr", {}, ["State", "Name", "Trials done", "Best value", "Created", "Labels", ""].map((label) => h("th", {}, label)))),
      h("tbody", {}, rows),
    );
    body.hidden = rows.length === 0;
  }

  async function load(): Promise<boolean> {
    try {
      const page = await session.api.get<ListHyperparameterTuningJobsResponse>(tuningJobsPath(parent), { pageSize: PAGE_SIZE, pageToken }, scope.signal);
      const jobs = [...(page.hyperparameterTuningJobs ?? [])].sort((a, b) => (b.createTime ?? "").localeCompare(a.createTime ?? ""));
      errorSlot.replaceChildren();
      nextToken = page.nextPageToken ?? "";
      render(jobs);
      prev.disabled = tokens.length === 0;
      next.disabled = !nextToken;
      if (jobs.length === 0 && tokens.length === 0) {
        replace(
          errorSlot,
          h(
            "div",
            { class: "empty", testid: "studies-empty" },
            `No tuning jobs in projects/${parent.project}/locations/${parent.location} yet. `,
            "Start one with ",
            h("code", {}, "mldiag hp-tuning-jobs create"),
            " or the Vertex AI SDK's ",
            h("code", {}, "HyperparameterTuningJob"),
            ".",
          ),
        );
      }
      const going = jobs.filter((job) => !isTerminal(job.state)).length;
      status.textContent = `${jobs.length} tuning job(s) on this page${going ? `, ${going} not ended` : ""}`;
      return going > 0;
    } catch (error) {
      if (scope.disposed) return false;
      render([]);
      status.textContent = "";
      replace(errorSlot, trainingUnavailable(error) ? unavailableNotice(error) : errorBox(error));
      throw error;
    }
  }

  const poller = new Poller(scope, load, (state) => {
    live.className = `live ${state === "polling" ? "live" : ""}`;
    live.dataset["state"] = state;
    live.textContent = state === "polling" ? "● live" : state === "retrying" ? "○ retrying" : "○ idle";
  });
  poller.now();
  // A study created elsewhere: its run appears (run-registry creates it from the study's fact).
  const nudge = new Throttle(() => poller.now(), 2000);
  scope.add(() => nudge.stop());
  watch(session.api, "/v1/machineLearningRuns:watch", scope, {
    onUpdate: (update) => {
      if (update.kind === "run") nudge.trigger();
    },
    onResync: () => nudge.trigger(),
  });

  return h(
    "div",
    { class: "page jobs-page studies-page" },
    h(
      "div",
      { class: "page-head" },
      h("h2", {}, "Tuning jobs"),
      live,
      h("span", { class: "spacer" }),
      h("label", { class: "inline" }, "project ", project),
      h("label", { class: "inline" }, "location ", location),
    ),
    errorSlot,
    body,
    h("div", { class: "pager" }, status, h("span", { class: "spacer" }), prev, next),
  );
}

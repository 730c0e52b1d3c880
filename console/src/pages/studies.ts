// The hyperparameter tuning jobs (studies) of a project and location: state, name, trials done
// out of the most asked for, the best value of the objective. Refreshed every 2 s while any
// study on the page has not ended, and when the runs stream says a run changed (a study is a
// run, and so is each trial).

import { formatTime } from "../format";
import { h } from "../h";
import { isTerminal } from "../jobs";
import { runHref, tuningJobHref, tuningJobsHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
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
import { labelChips } from "../ui";
import { jobStateBadge } from "./jobparts";
import { clickableRow, trainingListPage } from "./trainlist";

export function studiesPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  return trainingListPage<HyperparameterTuningJob, ListHyperparameterTuningJobsResponse>(session, scope, query, {
    kind: "studies",
    pageClass: "page jobs-page studies-page",
    tableClass: "table jobs-table studies-table",
    title: "Tuning jobs",
    href: tuningJobsHref,
    path: tuningJobsPath,
    items: (page) => page.hyperparameterTuningJobs ?? [],
    sortTime: (job) => job.createTime,
    columns: ["State", "Name", "Trials done", "Best value", "Created", "Labels", ""],
    row: (job, parent) => {
      const jobId = tuningJobIdOf(job);
      const href = tuningJobHref(parent, jobId);
      const counts = trialCounts(job);
      const objective = primaryMetric(job.studySpec);
      const best = objective ? bestTrial(job.trials ?? [], objective.metricId, objective.goal) : null;
      return clickableRow(
        href,
        { jobId, state: job.state },
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
    },
    empty: () => ["Start one with ", h("code", {}, "mldiag hp-tuning-jobs create"), " or the Vertex AI SDK's ", h("code", {}, "HyperparameterTuningJob"), "."],
    noun: "tuning job(s)",
    live: { title: "Refreshed every 2 s while a study on this page runs", going: (job) => !isTerminal(job.state) },
  });
}

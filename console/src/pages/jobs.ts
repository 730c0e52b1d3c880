// The training jobs table: state, name, created, duration, pools; refreshed every 2 s while
// any job on the page has not ended, and at once when the runs stream says a run changed
// (every job is a run: a new job, or a job's state, shows up there first).

import { formatDuration, formatTime } from "../format";
import { h } from "../h";
import { type CustomJob, isTerminal, jobIdOf, jobSeconds, jobsPath, type ListCustomJobsResponse, poolsSummary } from "../jobs";
import { jobHref, jobsHref, runHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { labelChips } from "../ui";
import { jobStateBadge } from "./jobparts";
import { clickableRow, trainingListPage } from "./trainlist";

export function jobsPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  return trainingListPage<CustomJob, ListCustomJobsResponse>(session, scope, query, {
    kind: "jobs",
    pageClass: "page jobs-page",
    tableClass: "table jobs-table",
    title: "Training jobs",
    href: jobsHref,
    path: jobsPath,
    items: (page) => page.customJobs ?? [],
    sortTime: (job) => job.createTime,
    columns: ["State", "Name", "Created", "Duration", "Pools (machine × replicas)", "Labels", "Run"],
    row: (job, parent) => {
      const jobId = jobIdOf(job);
      const href = jobHref(parent, jobId);
      const seconds = jobSeconds(job);
      return clickableRow(
        href,
        { jobId, state: job.state },
        h("td", {}, jobStateBadge(job.state)),
        h(
          "td",
          { class: "name" },
          h("a", { href, testid: "job-link" }, job.displayName || jobId),
          h("span", { class: "sub" }, jobId),
        ),
        h("td", { title: job.createTime ?? "" }, formatTime(job.createTime)),
        h(
          "td",
          { testid: "job-duration" },
          formatDuration(seconds),
          !isTerminal(job.state) ? h("span", { class: "sub" }, job.startTime ? "running" : "not started") : null,
        ),
        h(
          "td",
          { testid: "job-pools" },
          poolsSummary(job.jobSpec.workerPoolSpecs).map((pool) => h("span", { class: "chip pool" }, pool)),
        ),
        h("td", {}, labelChips(job.labels ?? {})),
        h(
          "td",
          { class: "links" },
          h("a", { href: runHref(jobId, "metrics"), title: "The job's run: metrics" }, "metrics"),
          " · ",
          h("a", { href: runHref(jobId, "events"), title: "The job's run: events" }, "events"),
        ),
      );
    },
    empty: () => ["Submit one with ", h("code", {}, "mldiag jobs create"), " or the Vertex AI SDK."],
    noun: "job(s)",
    live: { title: "Refreshed every 2 s while a job on this page runs", going: (job) => !isTerminal(job.state) },
  });
}

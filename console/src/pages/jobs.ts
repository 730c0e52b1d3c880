// The training jobs table: state, name, created, duration, pools; refreshed every 2 s while
// any job on the page has not ended, and at once when the runs stream says a run changed
// (every job is a run: a new job, or a job's state, shows up there first).

import { formatDuration, formatTime } from "../format";
import { h, replace } from "../h";
import {
  type CustomJob,
  isTerminal,
  jobIdOf,
  jobSeconds,
  jobsPath,
  type ListCustomJobsResponse,
  poolsSummary,
  trainingUnavailable,
} from "../jobs";
import { jobHref, navigate, parentOf, type Parent, replaceHash, jobsHref, runHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { watch } from "../sse";
import { Throttle } from "../throttle";
import { errorBox, labelChips } from "../ui";
import { jobStateBadge, Poller, unavailableNotice } from "./jobparts";

const PAGE_SIZE = 50;

export function jobsPage(session: Session, scope: Scope, query: URLSearchParams): HTMLElement {
  let parent: Parent = parentOf(query);
  let tokens: string[] = [];
  let pageToken = "";
  let nextToken = "";

  const table = h("table", { class: "table jobs-table", testid: "jobs-table" });
  const body = h("div", { class: "table-wrap" }, table);
  const errorSlot = h("div");
  const status = h("div", { class: "table-status", testid: "jobs-status" });
  const live = h("span", { class: "live", testid: "live", title: "Refreshed every 2 s while a job on this page runs" });
  const prev = h("button", { class: "button", testid: "prev-page", onclick: () => go(-1) }, "‹ Prev");
  const next = h("button", { class: "button", testid: "next-page", onclick: () => go(1) }, "Next ›");

  const project = h("input", { type: "text", value: parent.project, name: "project", testid: "jobs-project", title: "Project" });
  const location = h("input", { type: "text", value: parent.location, name: "location", testid: "jobs-location", title: "Location" });
  for (const input of [project, location]) {
    input.addEventListener("change", () => {
      parent = { project: project.value.trim() || "default", location: location.value.trim() || "local" };
      tokens = [];
      pageToken = "";
      replaceHash(jobsHref(parent));
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

  function render(jobs: CustomJob[]): void {
    const rows = jobs.map((job) => {
      const jobId = jobIdOf(job);
      const href = jobHref(parent, jobId);
      const seconds = jobSeconds(job);
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
    });
    replace(
      table,
      h(
        "thead",
        {},
        h("tr", {}, ["State", "Name", "Created", "Duration", "Pools (machine × replicas)", "Labels", "Run"].map((label) => h("th", {}, label))),
      ),
      h("tbody", {}, rows),
    );
    body.hidden = rows.length === 0;
  }

  /** One refresh; answers whether to keep refreshing (a job on the page is still going). */
  async function load(): Promise<boolean> {
    try {
      const page = await session.api.get<ListCustomJobsResponse>(
        jobsPath(parent),
        { pageSize: PAGE_SIZE, pageToken },
        scope.signal,
      );
      const jobs = [...(page.customJobs ?? [])].sort((a, b) => (b.createTime ?? "").localeCompare(a.createTime ?? ""));
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
            { class: "empty", testid: "jobs-empty" },
            `No training jobs in projects/${parent.project}/locations/${parent.location} yet. `,
            "Submit one with ",
            h("code", {}, "mldiag jobs create"),
            " or the Vertex AI SDK.",
          ),
        );
      }
      const going = jobs.filter((job) => !isTerminal(job.state)).length;
      status.textContent = `${jobs.length} job(s) on this page${going ? `, ${going} not ended` : ""}`;
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
  // A job created or changed elsewhere: its run changes too (run-registry mirrors jobs).
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
    { class: "page jobs-page" },
    h(
      "div",
      { class: "page-head" },
      h("h2", {}, "Training jobs"),
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

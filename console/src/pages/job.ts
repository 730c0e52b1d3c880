// A training job: its header (state, times, error, links to its run, cancel), its spec (pools,
// images or modules, args), its replicas and a replica's log tail. Refreshed every 2 s until
// the job reaches a terminal state, then left alone (a terminal job never changes).

import { formatDuration, formatTime, secondsBetween } from "../format";
import { h, replace } from "../h";
import {
  type CustomJob,
  isCancellable,
  isEmptyPool,
  isTerminal,
  jobPath,
  jobSeconds,
  type ListReplicasResponse,
  machineOf,
  POOL_ROLES,
  type Replica,
  replicaCount,
  replicaNames,
  type WorkerPoolSpec,
} from "../jobs";
import { jobHref, jobsHref, parentOf, replaceHash, runHref } from "../router";
import type { Scope } from "../scope";
import type { Session } from "../session";
import { errorBox, facts, kv, labelChips } from "../ui";
import { logViewer } from "./joblogs";
import { jobStateBadge, liveMark, Poller, replicaStateBadge, trainingErrorNotice } from "./jobparts";

export function jobPage(session: Session, scope: Scope, jobId: string, query: URLSearchParams): HTMLElement {
  const parent = parentOf(query);
  let job: CustomJob | null = null;
  let specShown = false;
  let cancelling = false;

  const header = h("header", { class: "run-header standalone job-header", testid: "job-header" }, h("div", { class: "muted" }, "loading…"));
  const errorSlot = h("div");
  const spec = h("section", { class: "card job-spec", testid: "job-spec" }, h("h3", {}, "Spec"));
  const replicasTable = h("table", { class: "table replicas-table", testid: "replicas-table" });
  const replicasError = h("div");
  const live = liveMark("Refreshed every 2 s until the job ends", "");
  const logs = logViewer(session, scope, parent, jobId, query.get("replica") ?? "workerpool0-0", (replica) => {
    replaceHash(jobHref(parent, jobId, { replica }));
    for (const row of replicasTable.querySelectorAll<HTMLElement>("tr[data-replica]")) {
      row.classList.toggle("selected", row.dataset["replica"] === replica);
    }
  });
  const body = h(
    "div",
    { class: "job-body" },
    h("div", { class: "job-grid" }, spec, h("section", { class: "card" }, h("h3", {}, "Replicas"), replicasError, h("div", { class: "table-wrap" }, replicasTable))),
    logs.el,
  );
  body.hidden = true;

  async function cancel(): Promise<void> {
    if (!window.confirm(`Cancel job ${jobId}? Its replicas are stopped.`)) return;
    cancelling = true;
    renderHeader();
    try {
      await session.api.post(jobPath(parent, jobId, ":cancel"), {}, scope.signal);
      replace(errorSlot);
    } catch (error) {
      if (!scope.disposed) replace(errorSlot, errorBox(error));
    } finally {
      cancelling = false;
      poller.now();
    }
  }

  function renderHeader(): void {
    if (!job) return;
    const ended = Boolean(job.endTime);
    const canCancel = isCancellable(job.state) && !session.shared && session.can("customJobs.cancel");
    replace(
      header,
      h(
        "div",
        { class: "run-header-body", dataset: { jobId, state: job.state } },
        h(
          "div",
          { class: "run-title" },
          h("h2", { testid: "job-name" }, job.displayName || jobId),
          jobStateBadge(job.state),
          labelChips(job.labels ?? {}),
          h("span", { class: "spacer" }),
          h("a", { class: "button", href: runHref(jobId, "metrics"), testid: "run-metrics-link" }, "Run metrics"),
          h("a", { class: "button", href: runHref(jobId, "events"), testid: "run-events-link" }, "Run events"),
          canCancel
            ? h(
                "button",
                { class: "button danger", testid: "cancel-job", disabled: cancelling, onclick: () => void cancel() },
                cancelling ? "Cancelling…" : "Cancel job",
              )
            : null,
        ),
        facts([
          ["Job id", h("code", {}, jobId)],
          ["Created", formatTime(job.createTime)],
          ["Started", formatTime(job.startTime)],
          [ended ? "Ended" : "Updated", formatTime(ended ? job.endTime : job.updateTime)],
          [ended ? "Ran for" : "Running for", job.startTime || ended ? formatDuration(jobSeconds(job)) : "not started"],
        ]),
        job.error
          ? h(
              "div",
              { class: "run-error", testid: "job-error" },
              h("b", {}, RPC_CODES[job.error.code] ?? `code ${job.error.code}`),
              " ",
              job.error.message ?? "",
            )
          : null,
      ),
    );
  }

  function renderSpec(current: CustomJob): void {
    const pools = current.jobSpec.workerPoolSpecs;
    const scheduling = current.jobSpec.scheduling ?? {};
    const output = current.jobSpec.baseOutputDirectory?.outputUriPrefix;
    replace(
      spec,
      h("h3", {}, "Spec"),
      pools.map((pool, position) => poolSection(pool, position)),
      h("h4", {}, "Scheduling and outputs"),
      present([
        ["Timeout", scheduling.timeout ? timeout(scheduling.timeout) : "7d (the default)"],
        ["Restarts", scheduling.disableRetries ? "disabled" : scheduling.restartJobOnWorkerRestart ? "every replica when one restarts" : "the failed replica"],
        ["Strategy", scheduling.strategy && scheduling.strategy !== "STRATEGY_UNSPECIFIED" ? scheduling.strategy : null],
        ["Outputs", output ? h("code", {}, output) : null],
        ["Experiment", current.jobSpec.experiment || null],
      ]),
    );
  }

  function renderReplicas(replicas: Replica[]): void {
    const rows = replicas.map((replica) =>
      h(
        "tr",
        {
          class: replica.name === logs.replica() ? "clickable selected" : "clickable",
          dataset: { replica: replica.name, state: replica.state },
          title: "Show this replica's log",
          onclick: () => logs.select(replica.name),
        },
        h("td", { class: "key" }, replica.name),
        h("td", {}, replicaStateBadge(replica.state)),
        h("td", { class: "num", testid: "replica-attempt" }, String(replica.attempt)),
        h("td", {}, replica.executor || "—", replica.host ? h("span", { class: "sub" }, replica.host) : null),
        h("td", { class: "num", testid: "replica-exit" }, replica.exitCode ?? "—"),
        h("td", { class: "message", testid: "replica-message" }, replica.message || ""),
        h("td", { title: replica.startTime ?? "" }, formatTime(replica.startTime)),
        h("td", {}, replica.startTime ? formatDuration(secondsBetween(replica.startTime, replica.endTime)) : "—"),
      ),
    );
    replace(
      replicasTable,
      h(
        "thead",
        {},
        h("tr", {}, ["Replica", "State", "Attempt", "Executor / host", "Exit", "Message", "Started", "Ran for"].map((label) => h("th", {}, label))),
      ),
      h(
        "tbody",
        {},
        rows.length ? rows : h("tr", {}, h("td", { colSpan: 8, class: "empty" }, "No replica placed yet (the job waits for capacity).")),
      ),
    );
  }

  function replicaNamesNow(replicas: Replica[]): string[] {
    const names = new Set(replicas.map((replica) => replica.name));
    for (const name of replicaNames(job?.jobSpec.workerPoolSpecs ?? [])) names.add(name);
    return [...names].sort(byReplica);
  }

  async function load(): Promise<boolean> {
    const [fetched, replicas] = await Promise.allSettled([
      session.api.get<CustomJob>(jobPath(parent, jobId), {}, scope.signal),
      session.api.get<ListReplicasResponse>(jobPath(parent, jobId, "/replicas"), {}, scope.signal),
    ]);
    if (scope.disposed) return false;
    if (fetched.status === "rejected") {
      const error: unknown = fetched.reason;
      if (job === null) header.hidden = true;
      replace(errorSlot, trainingErrorNotice(error), h("a", { href: jobsHref(parent) }, "← Jobs"));
      throw error;
    }
    job = fetched.value;
    replace(errorSlot);
    header.hidden = false;
    body.hidden = false;
    renderHeader();
    if (!specShown) {
      renderSpec(job);
      specShown = true;
    }
    const terminal = isTerminal(job.state);
    if (terminal) logs.jobEnded();
    if (replicas.status === "fulfilled") {
      replace(replicasError);
      const list = replicas.value.replicas ?? [];
      renderReplicas(list);
      logs.setReplicas(replicaNamesNow(list));
    } else {
      replace(replicasError, errorBox(replicas.reason));
      logs.setReplicas(replicaNamesNow([]));
    }
    return !terminal;
  }

  const poller = new Poller(scope, load, live.onState);
  poller.now();

  return h(
    "div",
    { class: "page job-page", dataset: { jobId } },
    h("div", { class: "page-head" }, h("a", { href: jobsHref(parent) }, "← Jobs"), h("span", { class: "spacer" }), live.el),
    errorSlot,
    header,
    body,
  );
}

/** google.rpc.Code names, for a job's `error.code`. */
const RPC_CODES: Record<number, string> = {
  1: "CANCELLED",
  2: "UNKNOWN",
  3: "INVALID_ARGUMENT",
  4: "DEADLINE_EXCEEDED",
  5: "NOT_FOUND",
  9: "FAILED_PRECONDITION",
  10: "ABORTED",
  13: "INTERNAL",
  14: "UNAVAILABLE",
};

function byReplica(a: string, b: string): number {
  const key = (name: string): [number, number] => {
    const match = /^workerpool(\d+)-(\d+)$/.exec(name);
    return match ? [Number(match[1]), Number(match[2])] : [99, 0];
  };
  const [pa, ia] = key(a);
  const [pb, ib] = key(b);
  return pa - pb || ia - ib || a.localeCompare(b);
}

function poolSection(pool: WorkerPoolSpec, position: number): HTMLElement | null {
  if (isEmptyPool(pool)) return null;
  const container = pool.containerSpec;
  const python = pool.pythonPackageSpec;
  const env = container?.env ?? python?.env ?? [];
  const args = container?.args ?? python?.args ?? [];
  const disk = pool.diskSpec;
  return h(
    "div",
    { class: "pool", testid: "pool", dataset: { pool: position } },
    h(
      "h4",
      {},
      `workerpool${position} · ${POOL_ROLES[position] ?? "pool"} · `,
      h("span", { testid: "pool-machine" }, `${machineOf(pool)} × ${replicaCount(pool)}`),
    ),
    present([
      ...(container
        ? ([
            ["Image", h("code", { testid: "pool-image" }, container.imageUri)],
            ["Command", container.command?.length ? h("code", { testid: "pool-command" }, words(container.command)) : null],
          ] as [string, Node | string | null][])
        : []),
      ...(python
        ? ([
            ["Executor image", h("code", { testid: "pool-image" }, python.executorImageUri)],
            ["Module", h("code", { testid: "pool-module" }, python.pythonModule)],
            ["Packages", h("span", {}, (python.packageUris ?? []).map((uri) => h("code", { class: "block" }, uri)))],
          ] as [string, Node | string | null][])
        : []),
      ["Args", args.length ? h("code", { testid: "pool-args" }, words(args)) : null],
      ["Env", env.length ? h("span", { class: "chips" }, env.map((v) => h("span", { class: "chip" }, `${v.name}=${v.value ?? ""}`))) : null],
      ["Disk", disk && (disk.bootDiskType || disk.bootDiskSizeGb) ? `${disk.bootDiskType || "default"}, ${disk.bootDiskSizeGb ?? 0} GB` : null],
    ]),
  );
}

/** Key/value rows without the absent ones (a spec names only what it sets). */
function present(pairs: [string, Node | string | null][]): HTMLElement {
  return kv(pairs.filter(([, value]) => value !== null && value !== ""));
}

/** A proto Duration (`"3600s"`) for people, with the wire value in the tooltip. */
function timeout(value: string): HTMLElement {
  const seconds = Number(value.replace(/s$/, ""));
  return h("span", { title: value }, Number.isFinite(seconds) ? formatDuration(seconds) : value);
}

/** A command line as a shell would read it back (words with spaces quoted). */
function words(list: string[]): string {
  return list.map((word) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`)).join(" ");
}

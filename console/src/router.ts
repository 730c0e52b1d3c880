// Hash routes: #/runs, #/runs/<id>[/<tab>], #/compare?runs=a,b, #/share/<token>[/<tab>],
// #/jobs[?project=&location=], #/jobs/<id>[?project=&location=&replica=],
// #/tuning[?project=&location=], #/tuning/<id>[?project=&location=&metric=],
// #/models[?project=&location=], #/models/<id>[?project=&location=&version=], #/alerts.
// #/runs/<id>/events/<event id> is the events tab with that event picked (notifications link so).
// #/runbooks/<name> is a runbook (docs/runbooks/<name>.md), the analyzers' reports link there.

export const TABS = ["overview", "metrics", "configs", "events", "profiles"] as const;
export type Tab = (typeof TABS)[number];

export type Route =
  | { page: "signin" }
  | { page: "runs"; query: URLSearchParams }
  | { page: "run"; runId: string; tab: Tab; query: URLSearchParams }
  | { page: "compare"; runs: string[]; query: URLSearchParams }
  | { page: "share"; token: string; tab: Tab; query: URLSearchParams }
  | { page: "jobs"; query: URLSearchParams }
  | { page: "job"; jobId: string; query: URLSearchParams }
  | { page: "studies"; query: URLSearchParams }
  | { page: "study"; jobId: string; query: URLSearchParams }
  | { page: "models"; query: URLSearchParams }
  | { page: "model"; modelId: string; query: URLSearchParams }
  | { page: "alerts" }
  | { page: "runbook"; name: string }
  | { page: "notfound"; path: string };

export function parseHash(hash: string): Route {
  const text = hash.replace(/^#\/?/, "");
  const mark = text.indexOf("?");
  const path = mark < 0 ? text : text.slice(0, mark);
  const query = new URLSearchParams(mark < 0 ? "" : text.slice(mark + 1));
  const parts = path.split("/").filter(Boolean).map(decode);
  const tab = (name: string | undefined): Tab | null =>
    name === undefined ? "overview" : (TABS as readonly string[]).includes(name) ? (name as Tab) : null;
  const [first, second, third] = parts;
  if (first === undefined || (first === "runs" && second === undefined)) return { page: "runs", query };
  if (first === "signin") return { page: "signin" };
  if (first === "runs" && second !== undefined && third === "events" && parts.length === 4) {
    query.set("event", parts[3] ?? "");
    return { page: "run", runId: second, tab: "events", query };
  }
  if (first === "runs" && second !== undefined && parts.length <= 3) {
    const t = tab(third);
    if (t) return { page: "run", runId: second, tab: t, query };
  }
  if (first === "compare") {
    const runs = (query.get("runs") ?? "").split(",").map((r) => r.trim()).filter(Boolean);
    return { page: "compare", runs, query };
  }
  if (first === "jobs" && second === undefined) return { page: "jobs", query };
  if (first === "jobs" && second !== undefined && parts.length === 2) return { page: "job", jobId: second, query };
  if (first === "tuning" && second === undefined) return { page: "studies", query };
  if (first === "tuning" && second !== undefined && parts.length === 2) return { page: "study", jobId: second, query };
  if (first === "models" && second === undefined) return { page: "models", query };
  if (first === "models" && second !== undefined && parts.length === 2) return { page: "model", modelId: second, query };
  if (first === "alerts" && second === undefined) return { page: "alerts" };
  if (first === "runbooks" && parts.length <= 2) return { page: "runbook", name: second ?? "README" };
  if (first === "share" && second !== undefined && parts.length <= 3) {
    const t = tab(third);
    if (t) return { page: "share", token: second, tab: t, query };
  }
  return { page: "notfound", path };
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

export function runHref(runId: string, tab: Tab = "overview", query?: Record<string, string>): string {
  const base = `#/runs/${encodeURIComponent(runId)}`;
  return withQuery(tab === "overview" ? base : `${base}/${tab}`, query);
}

export function withQuery(href: string, query?: Record<string, string>): string {
  const params = new URLSearchParams(query ?? {}).toString();
  return params ? `${href}?${params}` : href;
}

export function navigate(href: string): void {
  if (location.hash === href) return;
  location.hash = href;
}

/** Change the hash without a history entry or a re-render (filters, selections). */
export function replaceHash(href: string): void {
  history.replaceState(history.state, "", href);
}

/** The project and location a training resource lives in (the API's short form's defaults). */
export interface Parent {
  project: string;
  location: string;
}

export const DEFAULT_PROJECT = "default";
export const DEFAULT_LOCATION = "local";

/** The parent a jobs route names (`?project=&location=`), defaults when absent. */
export function parentOf(query: URLSearchParams): Parent {
  return { project: query.get("project") || DEFAULT_PROJECT, location: query.get("location") || DEFAULT_LOCATION };
}

/** Only what differs from the defaults goes into a jobs link. */
function parentQuery(parent: Parent): Record<string, string> {
  const query: Record<string, string> = {};
  if (parent.project !== DEFAULT_PROJECT) query["project"] = parent.project;
  if (parent.location !== DEFAULT_LOCATION) query["location"] = parent.location;
  return query;
}

export function jobsHref(parent: Parent): string {
  return withQuery("#/jobs", parentQuery(parent));
}

export function jobHref(parent: Parent, jobId: string, query?: Record<string, string>): string {
  return withQuery(`#/jobs/${encodeURIComponent(jobId)}`, { ...parentQuery(parent), ...query });
}

export function tuningJobsHref(parent: Parent): string {
  return withQuery("#/tuning", parentQuery(parent));
}

export function tuningJobHref(parent: Parent, jobId: string, query?: Record<string, string>): string {
  return withQuery(`#/tuning/${encodeURIComponent(jobId)}`, { ...parentQuery(parent), ...query });
}

export function modelsHref(parent: Parent): string {
  return withQuery("#/models", parentQuery(parent));
}

export function modelHref(parent: Parent, modelId: string, query?: Record<string, string>): string {
  return withQuery(`#/models/${encodeURIComponent(modelId)}`, { ...parentQuery(parent), ...query });
}

/** The compare page for these runs (in this order). */
export function compareHref(runIds: string[]): string {
  return `#/compare?runs=${runIds.map(encodeURIComponent).join(",")}`;
}

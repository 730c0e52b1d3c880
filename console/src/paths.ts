// API paths the console builds in more than one place (the pages and the early reads of
// prefetch.ts, which must not pull the rest of the app in).

/** Path segments may contain `/` (metric names); only encode what a URL path can't carry. */
export function pathPart(value: string): string {
  return value.split("/").map(encodeURIComponent).join("/");
}

/** The API path of a run (and of something under it, `suffix`). */
export function runPath(runId: string, suffix = ""): string {
  return `/v1/machineLearningRuns/${pathPart(runId)}${suffix}`;
}

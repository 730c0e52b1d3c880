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

export type Query = Record<string, string | number | boolean | null | undefined>;

/** `?a=1&b=x` of the query's set values (none: ""), in the query's key order. */
export function queryString(query: Query): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `?${text}` : "";
}

/** What a metrics tab's chart reads: a metric's buckets (a step range when zoomed). */
export interface ChartRead {
  buckets: number;
  /** The API's grouping: "none" (one line) or "host" (a line per host). */
  groupBy: string;
  startStep?: number | undefined;
  endStep?: number | undefined;
  withTimes: boolean;
}

/** The URL of a chart's read of `metric` (the tab's loader and the early reads share it). */
export function chartReadUrl(runId: string, metric: string, read: ChartRead): string {
  return (
    runPath(runId, `/metrics/${pathPart(metric)}`) +
    queryString({
      buckets: read.buckets,
      groupBy: read.groupBy,
      startStep: read.startStep,
      endStep: read.endStep,
      withTimes: read.withTimes ? "true" : undefined,
    })
  );
}

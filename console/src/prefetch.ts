// Early reads: the GETs the first page will make, started by a tiny script inlined in
// index.html (see prefetchboot.ts and build.mjs) while the app's bundle still downloads and
// compiles, then handed to the API client when it asks for the same URL.
//
// Only reads that a signed-in visit makes anyway are started (the caller, and the run and its
// metric list on a run's metrics tab): a stale or refused token costs the same requests the
// app would have made, and an answer nobody takes expires unused.

import type { Answer } from "./api";
import { classify, compareNames, SECTIONS } from "./classify";
import { type ChartRead, chartReadUrl, runPath } from "./paths";
import { parseHash } from "./router";
import { storedToken } from "./token";

/** An answer taken later than this after its request went out is not used (refetched). */
export const PREFETCH_MAX_AGE_MS = 10_000;

interface Early {
  /** Read whole as soon as it comes, so whoever takes it has it at once. */
  answer: Promise<Answer>;
  token: string;
  startedAt: number;
}

/** Where the inline script leaves its requests for the app's bundle (another script). */
const SLOT = "__mldiagPrefetch";

type Slot = Map<string, Early>;

function slot(create: boolean): Slot | null {
  const holder = globalThis as unknown as Record<string, Slot | undefined>;
  const existing = holder[SLOT];
  if (existing || !create) return existing ?? null;
  const made: Slot = new Map();
  holder[SLOT] = made;
  return made;
}

/** The GETs the page at `hash` makes first, for a signed-in caller (none for a share link). */
export function firstReads(hash: string): string[] {
  const route = parseHash(hash);
  if (route.page === "share" || route.page === "runbook") return [];
  const reads = ["/v1/caller"];
  if (route.page === "run") {
    // the metric list first: it is what the first chart waits for
    if (route.tab === "metrics") reads.push(runPath(route.runId, "/metrics"));
    reads.push(runPath(route.runId));
  }
  return reads;
}

/** How many of a metrics tab's charts, in the order it shows them, are read early. */
export const EARLY_CHARTS = 6;

/**
 * At least the bucket count a metrics tab's chart asks for (its width in pixels) at this
 * viewport width, rounded up to 50: the layout of styles.css (.main at most 1680px wide with
 * 20px sides, .chart-grid columns of 380px or more 10px apart, .chart 8px padding and 1px
 * border). A chart takes an early read with as many buckets or more (see takeEarlyChart).
 */
export function chartBucketsGuess(viewportWidth: number): number {
  const content = Math.min(viewportWidth, 1680) - 40;
  const columns = Math.max(1, Math.floor((content + 10) / 390));
  const body = (content - 10 * (columns - 1)) / columns - 18;
  return Math.min(2000, Math.max(50, Math.ceil(body / 50) * 50));
}

/** The first `EARLY_CHARTS` names in the metrics tab's order (by section, then by name). */
export function firstCharts(names: string[]): string[] {
  const order = new Map(SECTIONS.map(([section], i) => [section, i]));
  const rank = (name: string): number => order.get(classify(name)) ?? SECTIONS.length;
  return [...names].sort((a, b) => rank(a) - rank(b) || compareNames(a, b)).slice(0, EARLY_CHARTS);
}

function read(url: string, token: string): Promise<Answer> {
  const answer = fetch(url, { headers: { Authorization: `Bearer ${token}` } }).then(async (response) => ({
    ok: response.ok,
    status: response.status,
    statusText: response.statusText,
    text: await response.text(),
  }));
  answer.catch(() => undefined); // a failure is seen (and reported) by whoever takes it
  return answer;
}

/** Start the first page's reads with the stored token; nothing without one. On a run's
 * metrics tab, once the metric list is in, the reads of its first charts as well. Settles
 * once every early read is out (at once when there is no chart read to wait for). */
export function startPrefetch(hash: string = location.hash, now: () => number = () => performance.now(), viewportWidth: () => number = () => innerWidth): Promise<void> {
  const token = storedToken();
  if (!token) return Promise.resolve();
  const early = slot(true);
  if (!early) return Promise.resolve();
  for (const url of firstReads(hash)) early.set(url, { answer: read(url, token), token, startedAt: now() });
  const route = parseHash(hash);
  if (route.page !== "run" || route.tab !== "metrics") return Promise.resolve();
  const list = early.get(runPath(route.runId, "/metrics"));
  if (!list) return Promise.resolve();
  const chart = {
    buckets: chartBucketsGuess(viewportWidth()),
    groupBy: route.query.get("hosts") === "1" ? "host" : "none",
    withTimes: route.query.get("x") === "time",
  };
  return list.answer.then((answer) => {
    if (!answer.ok) return;
    const metrics = (JSON.parse(answer.text) as { metrics?: { name: string }[] }).metrics ?? [];
    // All at once: the first chart's read going alone (the others after it) made it shorter
    // but the first chart no sooner and the last later (benchmarks/console_first_chart.py).
    for (const name of firstCharts(metrics.map((metric) => metric.name))) {
      const url = chartReadUrl(route.runId, name, chart);
      early.set(url, { answer: read(url, token), token, startedAt: now() });
    }
  }, () => undefined);
}

/**
 * An early read of `metric`'s chart on the run at `runId` that serves `read` (the same
 * grouping and times, no step range, at least as many buckets: more than the chart's pixels
 * draw the same), at most once; null when there is none.
 */
export function takeEarlyChart(runId: string, metric: string, read: ChartRead, token: string, now: () => number = () => performance.now()): Promise<Answer> | null {
  const early = slot(false);
  if (!early || read.startStep !== undefined || read.endStep !== undefined) return null;
  const [path] = chartReadUrl(runId, metric, read).split("?");
  for (const [url, entry] of early) {
    const [entryPath, query] = url.split("?");
    if (entryPath !== path || query === undefined) continue;
    const params = new URLSearchParams(query);
    const buckets = Number(params.get("buckets"));
    const fits =
      params.get("groupBy") === read.groupBy &&
      (params.get("withTimes") === "true") === read.withTimes &&
      !params.has("startStep") &&
      !params.has("endStep") &&
      buckets >= read.buckets;
    if (!fits) continue;
    early.delete(url);
    if (now() - entry.startedAt > PREFETCH_MAX_AGE_MS || entry.token !== token) return null;
    return entry.answer;
  }
  return null;
}

/**
 * The early answer for `url` sent with `token`'s header, at most once; null when there is
 * none, it is too old, or it was sent with another token.
 */
export function takePrefetched(url: string, token: string, now: () => number = () => performance.now()): Promise<Answer> | null {
  const early = slot(false);
  const entry = early?.get(url);
  if (!early || !entry) return null;
  early.delete(url);
  if (now() - entry.startedAt > PREFETCH_MAX_AGE_MS || entry.token !== token) return null;
  return entry.answer;
}

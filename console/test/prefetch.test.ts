import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import { Api } from "../src/api";
import { chartReadUrl } from "../src/paths";
import {
  chartBucketsGuess,
  EARLY_CHARTS,
  firstCharts,
  firstReads,
  PREFETCH_MAX_AGE_MS,
  startPrefetch,
  takeEarlyChart,
  takePrefetched,
} from "../src/prefetch";

const globals = globalThis as unknown as Record<string, unknown>;
const realFetch = globalThis.fetch;

/** A browser-like global: a stored token and a fetch that records what it is asked. */
function browser(token: string | null): { asked: { url: string; auth: string | null }[] } {
  const asked: { url: string; auth: string | null }[] = [];
  const store = new Map<string, string>(token === null ? [] : [["mldiag.token", token]]);
  globals["localStorage"] = { getItem: (key: string) => store.get(key) ?? null, setItem: () => {}, removeItem: () => {} };
  globalThis.fetch = (async (url: string, init?: RequestInit) => {
    asked.push({ url, auth: new Headers(init?.headers).get("Authorization") });
    // a metric list names three metrics; anything else echoes its URL
    const body = url.endsWith("/metrics") ? { url, metrics: [{ name: "step_time" }, { name: "loss" }, { name: "cpu_util" }] } : { url };
    return new Response(JSON.stringify(body), { status: url.includes("refused") ? 401 : 200 });
  }) as typeof fetch;
  return { asked };
}

/** Until the early reads a test started have all gone out (the charts' follow the list's). */
const settled = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 20));

afterEach(() => {
  delete globals["localStorage"];
  delete globals["__mldiagPrefetch"];
  globalThis.fetch = realFetch;
});

test("the first reads of a run's metrics tab: the caller, the metric list (first), the run", () => {
  assert.deepEqual(firstReads("#/runs/r%201/metrics?x=time"), [
    "/v1/caller",
    "/v1/machineLearningRuns/r%201/metrics",
    "/v1/machineLearningRuns/r%201",
  ]);
  assert.deepEqual(firstReads("#/runs/r1"), ["/v1/caller", "/v1/machineLearningRuns/r1"]);
  assert.deepEqual(firstReads("#/jobs"), ["/v1/caller"]);
  // a share link signs in with its own token, a runbook needs none: nothing early
  assert.deepEqual(firstReads("#/share/tok/metrics"), []);
  assert.deepEqual(firstReads("#/runbooks/hang"), []);
});

test("without a stored token nothing is read early", () => {
  const { asked } = browser(null);
  startPrefetch("#/runs/r1/metrics");
  assert.deepEqual(asked, []);
  assert.equal(takePrefetched("/v1/caller", "t"), null);
});

test("an early read is taken once, by a client with the token it was sent with", async () => {
  const { asked } = browser("secret");
  startPrefetch("#/runs/r1/metrics", () => 0, () => 1280);
  assert.deepEqual(
    asked.slice(0, 3).map((a) => a.url),
    ["/v1/caller", "/v1/machineLearningRuns/r1/metrics", "/v1/machineLearningRuns/r1"],
  );
  assert.ok(asked.every((a) => a.auth === "Bearer secret"));
  assert.equal(takePrefetched("/v1/caller", "another", () => 0), null); // signed in anew: not theirs
  const list = takePrefetched("/v1/machineLearningRuns/r1/metrics", "secret", () => 5);
  assert.ok(list);
  assert.equal(JSON.parse((await list).text).url, "/v1/machineLearningRuns/r1/metrics");
  assert.equal(takePrefetched("/v1/machineLearningRuns/r1/metrics", "secret", () => 5), null); // once
  await settled(); // the charts' reads that follow the list
});

test("an early read older than the limit is not used", () => {
  browser("secret");
  startPrefetch("#/runs/r1", () => 0);
  assert.equal(takePrefetched("/v1/machineLearningRuns/r1", "secret", () => PREFETCH_MAX_AGE_MS + 1), null);
});

test("the API client answers from an early read, then from the network", async () => {
  const { asked } = browser("secret");
  startPrefetch("#/runs/r1");
  const api = new Api("secret");
  const first = await api.get<{ url: string }>("/v1/machineLearningRuns/r1");
  assert.equal(first.url, "/v1/machineLearningRuns/r1");
  assert.equal(asked.length, 2); // nothing more was asked
  await api.get("/v1/machineLearningRuns/r1");
  assert.equal(asked.length, 3); // the second read goes out
  // with a query the URL differs: never answered from the early read of another
  await api.get("/v1/machineLearningRuns/r1", { view: "full" });
  assert.equal(asked.at(-1)?.url, "/v1/machineLearningRuns/r1?view=full");
});

test("an early read the API refused is reported like any answer", async () => {
  browser("refused");
  globals["__mldiagPrefetch"] = undefined;
  startPrefetch("#/runs/refused");
  const api = new Api("refused");
  let told = 0;
  api.onUnauthenticated = () => told++;
  await assert.rejects(api.get("/v1/machineLearningRuns/refused"), (error: { status?: number }) => error.status === 401);
  assert.equal(told, 1);
});

test("the charts' bucket guess is at least a chart's width in the metrics grid", () => {
  // 1280 px: three columns of 389 px bodies; one column below 830 px; capped at 2000
  assert.equal(chartBucketsGuess(1280), 400);
  assert.ok(chartBucketsGuess(800) >= 800 - 40 - 18);
  assert.ok(chartBucketsGuess(1680) >= (1640 - 30) / 4 - 18);
  assert.equal(chartBucketsGuess(100), 50);
});

test("the first charts are the metrics tab's first, by section then name", () => {
  assert.deepEqual(firstCharts(["zeta", "step_time", "loss", "cpu_util", "accuracy"]), ["accuracy", "loss", "step_time", "cpu_util", "zeta"]);
  assert.equal(firstCharts(Array.from({ length: 20 }, (_, i) => `m${i}`)).length, EARLY_CHARTS);
});

test("a metrics tab's first charts are read once the list is in, and taken by a chart they serve", async () => {
  const { asked } = browser("secret");
  startPrefetch("#/runs/r1/metrics", () => 0, () => 1280);
  await settled(); // the list comes in, then the charts' reads go out
  const reads = asked.slice(3).map((a) => a.url);
  const read = { buckets: 389, groupBy: "none", withTimes: false };
  assert.deepEqual(reads, [
    chartReadUrl("r1", "loss", { ...read, buckets: 400 }),
    chartReadUrl("r1", "step_time", { ...read, buckets: 400 }),
    chartReadUrl("r1", "cpu_util", { ...read, buckets: 400 }),
  ]);
  // not for another grouping, with times, zoomed, wider than the guess, or another token
  assert.equal(takeEarlyChart("r1", "loss", { ...read, groupBy: "host" }, "secret", () => 0), null);
  assert.equal(takeEarlyChart("r1", "loss", { ...read, withTimes: true }, "secret", () => 0), null);
  assert.equal(takeEarlyChart("r1", "loss", { ...read, startStep: 0, endStep: 9 }, "secret", () => 0), null);
  assert.equal(takeEarlyChart("r1", "loss", { ...read, buckets: 401 }, "secret", () => 0), null);
  assert.equal(takeEarlyChart("r1", "loss", read, "another", () => 0), null); // and it is gone
  const taken = takeEarlyChart("r1", "step_time", read, "secret", () => 0);
  assert.ok(taken);
  assert.equal(JSON.parse((await taken).text).url, reads[1]);
  assert.equal(takeEarlyChart("r1", "step_time", read, "secret", () => 0), null); // once
  const api = new Api("secret");
  const answer = await api.answer<{ url: string }>(takeEarlyChart("r1", "cpu_util", read, "secret", () => 0) ?? Promise.reject(new Error("none")));
  assert.equal(answer.url, reads[2]);
});

test("with hosts or time in the URL the early chart reads ask for them", async () => {
  const { asked } = browser("secret");
  startPrefetch("#/runs/r1/metrics?hosts=1&x=time", () => 0, () => 1280);
  await settled();
  assert.equal(asked[3]?.url, chartReadUrl("r1", "loss", { buckets: 400, groupBy: "host", withTimes: true }));
  assert.ok(takeEarlyChart("r1", "loss", { buckets: 389, groupBy: "host", withTimes: true }, "secret", () => 0));
});

test("the early reads settle once the first charts' reads are out (the app runs then)", async () => {
  const { asked } = browser("secret");
  await startPrefetch("#/runs/r1/metrics", () => 0, () => 1280);
  // the caller, the list, the run, then one read per chart: all sent before it settled
  assert.equal(asked.length, 3 + 3);
  assert.ok(asked.slice(3).every((a) => a.url.includes("/metrics/") && a.url.includes("buckets=")));
  // nothing to wait for: settled at once
  browser(null);
  await startPrefetch("#/runs/r1/metrics");
  browser("secret");
  delete globals["__mldiagPrefetch"];
  await startPrefetch("#/jobs");
});

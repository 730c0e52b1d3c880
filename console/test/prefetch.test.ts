import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import { Api } from "../src/api";
import { firstReads, PREFETCH_MAX_AGE_MS, startPrefetch, takePrefetched } from "../src/prefetch";

const globals = globalThis as unknown as Record<string, unknown>;
const realFetch = globalThis.fetch;

/** A browser-like global: a stored token and a fetch that records what it is asked. */
function browser(token: string | null): { asked: { url: string; auth: string | null }[] } {
  const asked: { url: string; auth: string | null }[] = [];
  const store = new Map<string, string>(token === null ? [] : [["mldiag.token", token]]);
  globals["localStorage"] = { getItem: (key: string) => store.get(key) ?? null, setItem: () => {}, removeItem: () => {} };
  globalThis.fetch = (async (url: string, init?: RequestInit) => {
    asked.push({ url, auth: new Headers(init?.headers).get("Authorization") });
    return new Response(JSON.stringify({ url }), { status: url.includes("refused") ? 401 : 200 });
  }) as typeof fetch;
  return { asked };
}

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
  startPrefetch("#/runs/r1/metrics", () => 0);
  assert.deepEqual(
    asked.map((a) => a.url),
    ["/v1/caller", "/v1/machineLearningRuns/r1/metrics", "/v1/machineLearningRuns/r1"],
  );
  assert.ok(asked.every((a) => a.auth === "Bearer secret"));
  assert.equal(takePrefetched("/v1/caller", "another", () => 0), null); // signed in anew: not theirs
  const list = takePrefetched("/v1/machineLearningRuns/r1/metrics", "secret", () => 5);
  assert.ok(list);
  assert.equal(JSON.parse((await list).text).url, "/v1/machineLearningRuns/r1/metrics");
  assert.equal(takePrefetched("/v1/machineLearningRuns/r1/metrics", "secret", () => 5), null); // once
});

test("an early read older than the limit is not used", () => {
  browser("secret");
  startPrefetch("#/runs/r1", () => 0);
  assert.equal(takePrefetched("/v1/machineLearningRuns/r1", "secret", () => PREFETCH_MAX_AGE_MS + 1), null);
});

test("the API client answers from an early read, then from the network", async () => {
  const { asked } = browser("secret");
  startPrefetch("#/runs/r1/metrics");
  const api = new Api("secret");
  const first = await api.get<{ url: string }>("/v1/machineLearningRuns/r1/metrics");
  assert.equal(first.url, "/v1/machineLearningRuns/r1/metrics");
  assert.equal(asked.length, 3); // nothing more was asked
  await api.get("/v1/machineLearningRuns/r1/metrics");
  assert.equal(asked.length, 4); // the second read goes out
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

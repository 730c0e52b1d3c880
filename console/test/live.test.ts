import assert from "node:assert/strict";
import { test } from "node:test";

import { readEvents } from "../src/sse";
import { Throttle } from "../src/throttle";

function stream(chunks: string[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
  });
}

test("readEvents parses messages split anywhere and skips comments", async () => {
  const seen: [string, string][] = [];
  await readEvents(
    stream(["retry: 2000\nevent: ready\ndata: {}\n\n: keep-", "alive\n\nevent: up", 'date\ndata: {"runId":"r","kind":"metrics"}\r\n\r\n']),
    (event, data) => seen.push([event, data]),
  );
  assert.deepEqual(seen, [
    ["ready", "{}"],
    ["update", '{"runId":"r","kind":"metrics"}'],
  ]);
});

test("Throttle runs at most once per interval and always once more after a burst", async () => {
  const runs: number[] = [];
  const start = performance.now();
  const throttle = new Throttle(() => {
    runs.push(performance.now() - start);
  }, 100);
  let lastTrigger = 0;
  for (let i = 0; i < 10; i++) {
    throttle.trigger();
    lastTrigger = performance.now() - start;
    await new Promise((resolve) => setTimeout(resolve, 15));
  }
  await new Promise((resolve) => setTimeout(resolve, 300));
  throttle.stop();
  assert.ok(runs[0] !== undefined && runs[0] < 50, "the first trigger runs at once");
  for (let i = 1; i < runs.length; i++) assert.ok((runs[i] ?? 0) - (runs[i - 1] ?? 0) >= 95, "one run per interval");
  assert.ok((runs.at(-1) ?? 0) >= lastTrigger, "a trailing run after the last trigger");
  assert.ok(runs.length <= Math.ceil(lastTrigger / 100) + 1, "no more runs than intervals");
});

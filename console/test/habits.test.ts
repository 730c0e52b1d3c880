import assert from "node:assert/strict";
import { test } from "node:test";

import { csvField, csvFileName, csvNumber, toCsv } from "../src/csv";
import { formatTick, formatTicks } from "../src/format";
import { markdownTitle, renderMarkdown, runbookLink } from "../src/markdown";
import { parseHash } from "../src/router";
import { decadeTicks, positiveOnly } from "../src/scales";
import { clampSmoothing, initialSmoothing, smooth } from "../src/smoothing";
import type { MetricBucket } from "../src/types";

/** TensorBoard's smoothing written out longhand: the weighted sum of all finite values so far, over the sum of the weights. */
function bruteForceEma(values: (number | null)[], w: number): (number | null)[] {
  return values.map((value, i) => {
    if (value === null || !Number.isFinite(value)) return value;
    const seen = values.slice(0, i + 1).filter((v): v is number => v !== null && Number.isFinite(v));
    let numerator = 0;
    let denominator = 0;
    seen.forEach((v, j) => {
      const weight = (1 - w) * w ** (seen.length - 1 - j);
      numerator += weight * v;
      denominator += weight;
    });
    return numerator / denominator;
  });
}

test("smooth is the debiased EMA, gaps and NaN kept in place and not averaged", () => {
  const values: (number | null)[] = [];
  for (let i = 0; i < 300; i++) values.push(i % 37 === 5 ? null : i % 53 === 7 ? NaN : 2 * Math.exp(-i / 50) + 0.1 * Math.sin(i));
  for (const w of [0.1, 0.6, 0.9, 0.99]) {
    const got = smooth(values, w);
    const want = bruteForceEma(values, w);
    got.forEach((value, i) => {
      const expected = want[i];
      if (expected === null || expected === undefined || Number.isNaN(expected)) assert.deepEqual(value, expected, `at ${i}`);
      else assert.ok(value !== null && Math.abs(value - expected) < 1e-9 * Math.max(1, Math.abs(expected)), `w=${w} at ${i}: ${value} vs ${expected}`);
    });
  }
  assert.deepEqual(smooth([3, 1], 0), [3, 1]);
  assert.deepEqual(smooth([5, 5, 5], 0.9), [5, 5, 5].map(() => 5 + 0)); // debiased: a constant stays put
});

test("smoothing weights are clamped to 0..0.99; the URL wins over this browser's choice", () => {
  assert.equal(clampSmoothing(1), 0.99);
  assert.equal(clampSmoothing(-1), 0);
  assert.equal(clampSmoothing(NaN), 0);
  assert.equal(clampSmoothing(0.456), 0.46);
  const stored = { getItem: () => "0.8" };
  assert.equal(initialSmoothing(new URLSearchParams("smooth=0.3"), stored), 0.3);
  assert.equal(initialSmoothing(new URLSearchParams(""), stored), 0.8);
  assert.equal(initialSmoothing(new URLSearchParams(""), { getItem: () => null }), 0);
  assert.equal(initialSmoothing(new URLSearchParams("smooth=abc"), stored), 0);
});

test("log ticks are the powers of ten around the values", () => {
  assert.deepEqual(decadeTicks(0.3, 2.8), { range: [0.1, 10], ticks: [0.1, 1, 10] });
  assert.deepEqual(decadeTicks(1, 1000), { range: [1, 1000], ticks: [1, 10, 100, 1000] });
  assert.deepEqual(decadeTicks(2, 3), { range: [1, 10], ticks: [1, 10] });
  assert.deepEqual(decadeTicks(1e-6, 1e6).ticks, [1e-6, 1e-4, 1e-2, 1, 1e2, 1e4, 1e6]); // sparser past seven
  assert.deepEqual(decadeTicks(0, 5).ticks, [0.1, 1, 10]); // nothing placeable: a default decade
});

test("huge ticks (a diverged run's axis) are written as powers of ten", () => {
  assert.equal(formatTick(1e36), "1e36");
  assert.equal(formatTick(-2e15), "-2e15");
  assert.equal(formatTick(3e9), "3G");
});

test("a log axis drops values it cannot place and counts them", () => {
  assert.deepEqual(positiveOnly([1, 0, -2, null, NaN, 3, Infinity]), { values: [1, null, null, null, null, 3, null], dropped: 3 });
});

const bucket = (step: number, value: number, extra: Partial<MetricBucket> = {}): MetricBucket => ({
  startStep: step,
  endStep: step,
  firstStep: step,
  lastStep: step,
  count: 1,
  nanCount: Number.isNaN(value) ? 1 : 0,
  min: Number.isNaN(value) ? null : value,
  max: Number.isNaN(value) ? null : value,
  mean: Number.isNaN(value) ? null : value,
  last: value,
  lastTime: `2026-12-05T00:00:0${step}Z`,
  ...extra,
});

test("CSV: long format, raw values, NaN/Inf/-Inf, quoting, CRLF", () => {
  assert.equal(csvNumber(NaN), "NaN");
  assert.equal(csvNumber(Infinity), "Inf");
  assert.equal(csvNumber(-Infinity), "-Inf");
  assert.equal(csvNumber(null), "");
  assert.equal(csvNumber(0.1), "0.1");
  assert.equal(csvField('a "b", c'), '"a ""b"", c"');
  assert.equal(csvField("line\nbreak"), '"line\nbreak"');
  assert.equal(csvField("plain"), "plain");
  const csv = toCsv([
    { label: "loss", buckets: [bucket(1, 2.5), bucket(2, NaN), bucket(3, Infinity), bucket(4, -Infinity)] },
    { label: 'host "a", 1', buckets: [bucket(1, 0.5, { count: 3, nanCount: 1, min: 0.25, max: 0.75, mean: 0.5, last: NaN, startStep: 0, firstStep: 0 })] },
  ]);
  assert.equal(
    csv,
    [
      "series,step,time,value,min,max,points",
      "loss,1,2026-12-05T00:00:01Z,2.5,2.5,2.5,1",
      "loss,2,2026-12-05T00:00:02Z,NaN,,,1",
      "loss,3,2026-12-05T00:00:03Z,Inf,Inf,Inf,1",
      "loss,4,2026-12-05T00:00:04Z,-Inf,-Inf,-Inf,1",
      '"host ""a"", 1",1,2026-12-05T00:00:01Z,0.5,0.25,0.75,3',
      "",
    ].join("\r\n"),
  );
  assert.equal(csvFileName("run 1", "train/loss"), "run_1-train_loss.csv");
});

test("runbook links open the console's page; the renderer escapes and renders the runbooks' markdown", () => {
  assert.equal(runbookLink("hang.md"), "#/runbooks/hang");
  assert.equal(runbookLink("hang.md#what"), "#/runbooks/hang");
  assert.equal(runbookLink("../monitoring.md"), null);
  assert.deepEqual(parseHash("#/runbooks/hang"), { page: "runbook", name: "hang" });
  assert.deepEqual(parseHash("#/runbooks"), { page: "runbook", name: "README" });
  const md = [
    "# Runbook: hang <script>",
    "",
    "**Event type:** `HANG` · see [straggler](straggler.md), [monitoring](../monitoring.md)",
    "and [docs](https://example.com/a?b=1&c=2).",
    "",
    "| a | b |",
    "|---|---|",
    "| `x` | *y* |",
    "",
    "1. first",
    "   wrapped",
    "2. second",
    "",
    "```",
    "<b>code</b>",
    "```",
  ].join("\n");
  const html = renderMarkdown(md);
  assert.match(html, /^<h1>Runbook: hang &lt;script&gt;<\/h1>/);
  assert.match(html, /<strong>Event type:<\/strong> <code>HANG<\/code>/);
  assert.match(html, /<a href="#\/runbooks\/straggler">straggler<\/a>, monitoring/);
  assert.match(html, /<a href="https:\/\/example.com\/a\?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">docs<\/a>/);
  assert.match(html, /<table><thead><tr><th>a<\/th><th>b<\/th><\/tr><\/thead><tbody><tr><td><code>x<\/code><\/td>/);
  assert.match(html, /<ol><li>first wrapped<\/li><li>second<\/li><\/ol>/);
  assert.match(html, /<pre><code>&lt;b&gt;code&lt;\/b&gt;<\/code><\/pre>/);
  assert.ok(!html.includes("<script>"));
  assert.equal(markdownTitle(md), "hang <script>");
});

test("tick labels get the digits that keep neighbours apart", () => {
  // a lone point at step 100 once read "99 99.5 100 101 101" (100.5 to three digits)
  assert.deepEqual(formatTicks([99, 99.5, 100, 100.5, 101]), ["99", "99.5", "100", "100.5", "101"]);
  assert.deepEqual(formatTicks([12_340, 12_345, 12_350]), ["12.34k", "12.345k", "12.35k"]);
  assert.deepEqual(formatTicks([0, 0.5, 1]), ["0", "0.5", "1"]); // short when short is distinct
  assert.deepEqual(formatTicks([1e35, 1e36]), ["1e35", "1e36"]);
  assert.deepEqual(formatTicks([]), []);
});

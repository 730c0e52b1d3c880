import assert from "node:assert/strict";
import { test } from "node:test";

import { classify, compareNames } from "../src/classify";
import { mergeDiffs } from "../src/diff";
import { buildFilter, type Filters } from "../src/filters";
import { formatClock, formatNumber, formatTime } from "../src/format";
import { parseHash } from "../src/router";

const none: Filters = { state: "", runSet: "", label: "", after: "", before: "", q: "", orderBy: "", pageSize: "" };

test("buildFilter joins the filters with AND and quotes strings", () => {
  assert.equal(buildFilter(none), "");
  assert.equal(
    buildFilter({ ...none, state: "STATE_ACTIVE", runSet: 'a"b', label: "team=ml, gpu", q: "llama" }),
    'state = STATE_ACTIVE AND runSet = "a\\"b" AND labels.team = "ml" AND labels:gpu AND displayName:"llama"',
  );
  assert.match(buildFilter({ ...none, after: "2026-01-02T03:04" }), /^createTime >= "2026-01-0\dT\d\d:04:00.000Z"$/);
});

test("classify sorts metric names into sections", () => {
  assert.equal(classify("loss"), "quality");
  assert.equal(classify("eval/accuracy"), "quality");
  assert.equal(classify("grad_norm"), "quality");
  assert.equal(classify("train/step_time"), "performance");
  assert.equal(classify("tokens_per_second"), "performance");
  assert.equal(classify("mfu"), "performance");
  assert.equal(classify("duty_cycle"), "system");
  assert.equal(classify("host_cpu_utilization"), "system");
  assert.equal(classify("accelerator_memory_used"), "system");
  assert.equal(classify("my_custom_thing"), "other");
});

test("mergeDiffs gives every run its value of every differing key", () => {
  const rows = mergeDiffs([
    [{ section: "userConfigs", key: "lr", change: "CHANGED", baseValue: 1, otherValue: 2 }],
    [
      { section: "userConfigs", key: "warmup", change: "ADDED", baseValue: null, otherValue: 10 },
      { section: "userConfigs", key: "lr", change: "CHANGED", baseValue: 1, otherValue: 3 },
    ],
  ]);
  assert.deepEqual(
    rows.map((r) => [r.key, r.values, r.changed]),
    [
      ["lr", [1, 2, 3], [false, true, true]],
      ["warmup", [undefined, undefined, 10], [false, false, true]],
    ],
  );
});

test("parseHash reads every route", () => {
  assert.deepEqual(parseHash("#/runs/abc/metrics?x=time").page, "run");
  const run = parseHash("#/runs/abc/events?event=e1");
  assert.ok(run.page === "run" && run.runId === "abc" && run.tab === "events" && run.query.get("event") === "e1");
  const compare = parseHash("#/compare?runs=a,b");
  assert.ok(compare.page === "compare" && compare.runs.join() === "a,b");
  const share = parseHash("#/share/mldiag_share_x.y/profiles");
  assert.ok(share.page === "share" && share.token === "mldiag_share_x.y" && share.tab === "profiles");
  assert.equal(parseHash("").page, "runs");
  assert.equal(parseHash("#/runs/abc/nope").page, "notfound");
});

test("compareNames orders metric names case-insensitively, then by code point, in any locale", () => {
  const names = ["loss", "Accuracy", "eval/loss", "accuracy", "eval_loss", "b", "B", "lr"];
  assert.deepEqual([...names].sort(compareNames), ["Accuracy", "accuracy", "B", "b", "eval/loss", "eval_loss", "loss", "lr"]);
  assert.equal(compareNames("x", "x"), 0);
});

test("formatNumber writes whole numbers with commas, as en-US does, without Intl", () => {
  for (const value of [0, 7, 999, 1000, -1000, 123456, 1234567, -98765432, 999_999_999_999_999]) {
    assert.equal(formatNumber(value), value.toLocaleString("en-US"));
  }
  assert.equal(formatNumber(-0), "-0");
  assert.equal(formatNumber(0.5), "0.5");
  assert.equal(formatNumber(1e15), "1.00e+15");
});

test("formatTime writes the time today, the day this year, the year before", () => {
  const now = new Date();
  const at = (date: Date): string => date.toISOString();
  const today = new Date(now.getFullYear(), now.getMonth(), now.getDate(), 9, 5, 7);
  assert.equal(formatTime(at(today)), "09:05:07");
  assert.equal(formatClock(new Date(2026, 0, 1, 23, 59, 0)), "23:59:00");
  const otherDay = new Date(now.getFullYear(), now.getMonth() === 0 ? 1 : 0, 4, 14, 0, 9);
  const month = otherDay.getMonth() === 0 ? "Jan" : "Feb";
  assert.equal(formatTime(at(otherDay)), `${month} 4 14:00:09`);
  assert.equal(formatTime(at(new Date(2020, 11, 31, 1, 2, 3))), "Dec 31, 2020 01:02:03");
  assert.equal(formatTime(null), "—");
  assert.equal(formatTime("not a time"), "not a time");
});

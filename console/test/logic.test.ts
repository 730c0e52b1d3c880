import assert from "node:assert/strict";
import { test } from "node:test";

import { classify } from "../src/classify";
import { mergeDiffs } from "../src/diff";
import { buildFilter, type Filters } from "../src/filters";
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

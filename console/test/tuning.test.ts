import assert from "node:assert/strict";
import { test } from "node:test";

import { compareHref, parseHash, tuningJobHref, tuningJobsHref } from "../src/router";
import {
  categoryAxis,
  goodness,
  linearAxis,
  logAxis,
  niceTicks,
  numericAxis,
  rampColor,
  RAMP,
  reverseLogAxis,
} from "../src/scales";
import { lineSegments, objectiveModel, parallelModel, pathData, stepPath } from "../src/trialplots";
import {
  bestSoFar,
  bestTrial,
  flattenParameters,
  formatParameter,
  goalOf,
  type HyperparameterTuningJob,
  objectivePoints,
  type ParameterSpec,
  parseTuningJobName,
  stoppedEarly,
  type Trial,
  trialCounts,
  trialJobId,
  tuningJobPath,
} from "../src/tuning";

const PARENT = "projects/default/locations/local";

function trial(id: number, value: number | null, extra: Partial<Trial> = {}, parameters: Record<string, number | string> = {}): Trial {
  return {
    id: String(id),
    state: value === null ? "INFEASIBLE" : "SUCCEEDED",
    parameters: Object.entries(parameters).map(([parameterId, v]) => ({ parameterId, value: v })),
    ...(value === null ? {} : { finalMeasurement: { stepCount: "10", metrics: [{ metricId: "loss", value }] } }),
    customJob: `${PARENT}/customJobs/${1000 + id}`,
    ...extra,
  };
}

/** A deterministic sequence in [0, 1) (a test must not depend on Math.random's luck). */
function lcg(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state / 2 ** 31;
  };
}

test("a metric's goal: UNSPECIFIED and absent mean MAXIMIZE (Vertex), names and numbers read", () => {
  assert.equal(goalOf(undefined), "MAXIMIZE");
  assert.equal(goalOf({ metricId: "acc" }), "MAXIMIZE");
  assert.equal(goalOf({ metricId: "acc", goal: "GOAL_TYPE_UNSPECIFIED" }), "MAXIMIZE");
  assert.equal(goalOf({ metricId: "acc", goal: 1 }), "MAXIMIZE");
  assert.equal(goalOf({ metricId: "loss", goal: "MINIMIZE" }), "MINIMIZE");
  assert.equal(goalOf({ metricId: "loss", goal: 2 }), "MINIMIZE");
});

test("the best so far is the running min (MINIMIZE) or max (MAXIMIZE), checked against brute force", () => {
  const random = lcg(7);
  const trials = Array.from({ length: 60 }, (_, i) => trial(i + 1, random() < 0.15 ? null : Math.round(random() * 1000) / 100));
  for (const goal of ["MINIMIZE", "MAXIMIZE"] as const) {
    const points = objectivePoints(trials, "loss");
    const best = bestSoFar(points, goal);
    assert.equal(best.length, points.length);
    points.forEach((point, i) => {
      const prefix = points.slice(0, i + 1).map((p) => p.value);
      const expected = goal === "MINIMIZE" ? Math.min(...prefix) : Math.max(...prefix);
      assert.equal(best[i]?.value, expected, `${goal} at trial ${point.trialId}`);
      assert.equal(best[i]?.x, point.x);
    });
    const overall = bestTrial(trials, "loss", goal);
    assert.equal(overall?.value, best.at(-1)?.value);
  }
});

test("objective points go by trial id as a number and skip trials without a finite final value", () => {
  const trials = [trial(10, 0.5), trial(9, 0.7), trial(2, null), trial(1, NaN), trial(3, 0.9, { finalMeasurement: { metrics: [{ metricId: "acc", value: 1 }] } })];
  const points = objectivePoints(trials, "loss");
  assert.deepEqual(points.map((p) => p.trialId), ["9", "10"]);
  assert.deepEqual(points.map((p) => p.x), [9, 10]);
  assert.deepEqual(objectivePoints(trials, "acc").map((p) => p.trialId), ["3"]);
});

test("the best trial is the earliest one on a tie", () => {
  const trials = [trial(3, 0.2), trial(1, 0.5), trial(2, 0.2)];
  assert.equal(bestTrial(trials, "loss", "MINIMIZE")?.trial.id, "2");
  assert.equal(bestTrial(trials, "loss", "MAXIMIZE")?.trial.id, "1");
  assert.equal(bestTrial([trial(1, null)], "loss", "MINIMIZE"), null);
});

test("trials done count both terminal states; total is maxTrialCount", () => {
  const job = {
    maxTrialCount: 8,
    trials: [trial(1, 0.3), trial(2, null), trial(3, 0.1, { state: "ACTIVE" }), trial(4, 0.1, { state: "STOPPING" }), trial(5, 0.4, { state: 4 })],
  } as HyperparameterTuningJob;
  assert.deepEqual(trialCounts(job), { done: 3, total: 8, running: 2, succeeded: 2, infeasible: 1 });
});

test("the search space flattens depth first with conditional children after their parent", () => {
  const spec: ParameterSpec[] = [
    {
      parameterId: "optimizer",
      categoricalValueSpec: { values: ["sgd", "adam"] },
      conditionalParameterSpecs: [{ parameterSpec: { parameterId: "momentum", doubleValueSpec: { minValue: 0, maxValue: 0.99 } } }],
    },
    { parameterId: "lr", doubleValueSpec: { minValue: 1e-4, maxValue: 1e-1 }, scaleType: "UNIT_LOG_SCALE" },
  ];
  assert.deepEqual(flattenParameters(spec).map((p) => p.parameterId), ["optimizer", "momentum", "lr"]);
});

test("a trial's run is its custom job's id; the stopped-early flag is read in both spellings", () => {
  assert.equal(trialJobId(trial(4, 1)), "1004");
  assert.equal(trialJobId({ id: "1", state: "ACTIVE" }), null);
  assert.ok(stoppedEarly({ id: "1", state: "SUCCEEDED", stoppedEarly: true }));
  assert.ok(stoppedEarly({ id: "1", state: "SUCCEEDED", isTrialStoppedEarly: true }));
  assert.ok(!stoppedEarly(trial(1, 1)));
});

test("parameter values read short: integers bare, four digits, exponents for the very small", () => {
  assert.deepEqual(
    [3, 0.123456, 1e-4, 0.00012346, 2.5e7, "adam", null].map(formatParameter),
    ["3", "0.1235", "1e-4", "1.235e-4", "25000000", "adam", "—"],
  );
  assert.equal(formatParameter(2.5e6 + 0.5), "2.5e+6");
});

test("nice ticks are round values inside the range", () => {
  assert.deepEqual(niceTicks(0, 1, 5), [0, 0.2, 0.4, 0.6, 0.8, 1]);
  assert.deepEqual(niceTicks(3, 97, 5), [20, 40, 60, 80]);
  assert.deepEqual(niceTicks(0.013, 0.047, 4), [0.02, 0.03, 0.04]);
  assert.deepEqual(niceTicks(5, 5), [5]);
  for (const [lo, hi] of [[-3.2, 7.9], [1e-5, 3e-5], [100, 100000]] as const) {
    const ticks = niceTicks(lo, hi, 5);
    assert.ok(ticks.length >= 2 && ticks.length <= 11, `${lo}..${hi}: ${ticks.join()}`);
    assert.ok(ticks.every((t) => t >= lo - 1e-12 && t <= hi + 1e-12), `${lo}..${hi}: ${ticks.join()}`);
  }
});

test("linear, log and reverse-log axes place values from 0 (bottom) to 1 (top)", () => {
  const linear = linearAxis("x", "x", 10, 20);
  assert.equal(linear.position(15), 0.5);
  assert.equal(linear.position("12.5"), 0.25);
  assert.equal(linear.position(null), null);
  assert.equal(linear.position("adam"), null);
  assert.equal(linearAxis("x", "x", 3, 3).position(3), 0.5);

  const log = logAxis("lr", "lr", 1e-4, 1e-1);
  assert.ok(Math.abs((log.position(1e-3) ?? 0) - 1 / 3) < 1e-12);
  assert.equal(log.position(1e-4), 0);
  assert.equal(log.position(1e-1), 1);
  assert.equal(log.position(0), null);
  assert.deepEqual(log.ticks.map((t) => t.label), ["1e-4", "0.001", "0.01", "0.1"]);

  const reverse = reverseLogAxis("beta", "beta", 0.001, 1);
  assert.ok(Math.abs(reverse.position(0.001) ?? -1) < 1e-12);
  assert.ok(Math.abs((reverse.position(1) ?? 0) - 1) < 1e-12);
  // The top of the range is spread out: the middle value sits low, 0.99 well below the top.
  assert.ok((reverse.position(0.5) ?? 1) < 0.2);
  assert.ok((reverse.position(0.99) ?? 1) < 0.75);
  const ats = reverse.ticks.map((t) => t.at);
  assert.deepEqual(ats.map((a) => Math.round(a * 100) / 100), [0, 0.25, 0.5, 0.75, 1]);

  // A log scale over a range that reaches 0 cannot be drawn: linear instead.
  assert.equal(numericAxis("x", "x", "log", 0, 10).kind, "linear");
  assert.equal(numericAxis("x", "x", "log", 1, 10).kind, "log");
});

test("categories are evenly spaced in spec order; one alone sits in the middle", () => {
  const axis = categoryAxis("opt", "opt", ["sgd", "adam", "rmsprop", "adam"]);
  assert.deepEqual(axis.domain, ["sgd", "adam", "rmsprop"]);
  assert.deepEqual(["sgd", "adam", "rmsprop"].map((v) => axis.position(v)), [0, 0.5, 1]);
  assert.equal(axis.position("lamb"), null);
  assert.deepEqual(axis.ticks.map((t) => [t.label, t.at]), [["sgd", 0], ["adam", 0.5], ["rmsprop", 1]]);
  assert.equal(categoryAxis("x", "x", ["only"]).position("only"), 0.5);
});

test("goodness follows the goal, and the ramp runs from its first colour to its last", () => {
  assert.equal(goodness(0.1, 0.1, 0.9, "MINIMIZE"), 1);
  assert.equal(goodness(0.9, 0.1, 0.9, "MINIMIZE"), 0);
  assert.equal(goodness(0.9, 0.1, 0.9, "MAXIMIZE"), 1);
  assert.equal(goodness(0.5, 0.5, 0.5, "MAXIMIZE"), 1);
  assert.equal(rampColor(0), RAMP[0]);
  assert.equal(rampColor(1), RAMP[RAMP.length - 1]);
  assert.match(rampColor(0.37), /^#[0-9a-f]{6}$/);
});

const STUDY: HyperparameterTuningJob = {
  name: `${PARENT}/hyperparameterTuningJobs/42`,
  displayName: "study",
  state: "JOB_STATE_RUNNING",
  maxTrialCount: 6,
  parallelTrialCount: 2,
  studySpec: {
    metrics: [{ metricId: "loss", goal: "MINIMIZE" }],
    parameters: [
      { parameterId: "lr", doubleValueSpec: { minValue: 1e-4, maxValue: 1e-1 }, scaleType: "UNIT_LOG_SCALE" },
      { parameterId: "layers", integerValueSpec: { minValue: "1", maxValue: "8" }, scaleType: "UNIT_LINEAR_SCALE" },
      {
        parameterId: "optimizer",
        categoricalValueSpec: { values: ["sgd", "adam"] },
        conditionalParameterSpecs: [{ parentCategoricalValues: { values: ["sgd"] }, parameterSpec: { parameterId: "momentum", discreteValueSpec: { values: [0, 0.5, 0.9] } } } as { parameterSpec: ParameterSpec }],
      },
    ],
  },
  trials: [
    trial(1, 0.8, {}, { lr: 1e-3, layers: 2, optimizer: "sgd", momentum: 0.9 }),
    trial(2, 0.4, {}, { lr: 1e-2, layers: 4, optimizer: "adam" }),
    trial(3, null, {}, { lr: 1e-1, layers: 8, optimizer: "adam" }),
    trial(4, 0.6, { stoppedEarly: true }, { lr: 1e-4, layers: 1, optimizer: "sgd", momentum: 0 }),
    trial(5, 0.2, {}, { lr: 1e-2, layers: 3, optimizer: "adam" }),
  ],
};

test("parallel coordinates: an axis per parameter (scale per spec) then the objective; lines break where a parameter is absent", () => {
  const model = parallelModel(STUDY, "loss", "MINIMIZE");
  assert.deepEqual(model.axes.map((a) => [a.id, a.kind]), [["lr", "log"], ["layers", "linear"], ["optimizer", "category"], ["momentum", "linear"], ["loss", "linear"]]);
  // discrete values (few) are the ticks themselves; integer axes tick integers only
  assert.deepEqual(model.axes[3]?.ticks.map((t) => t.label), ["0", "0.5", "0.9"]);
  assert.ok(model.axes[1]?.ticks.every((t) => Number.isInteger(Number(t.label))));

  const [one, two, three, four, five] = model.rows;
  assert.equal(five?.goodness, 1); // the lowest loss is the best under MINIMIZE
  assert.equal(one?.goodness, 0);
  assert.equal(three?.goodness, null); // infeasible: no objective
  assert.equal(four?.stoppedEarly, true);
  assert.equal(two?.jobId, "1002");

  const xs = [0, 100, 200, 300, 400];
  // Trial 2 (adam) has no momentum: two runs, lr..optimizer and the objective alone.
  const segments = lineSegments(model.axes, two?.values ?? [], xs, 0, 100);
  assert.deepEqual(segments.map((run) => run.map(([x]) => x)), [[0, 100, 200], [400]]);
  assert.equal(segments[0]?.[2]?.[1], 0); // adam: the top of the optimizer axis
  assert.match(pathData(segments), /^M0 [\d.]+ L100 [\d.]+ L200 0 M400 [\d.]+ h0$/); // a lone point: a dot
  // Trial 1 (sgd, momentum 0.9) is one unbroken line through all five axes.
  assert.equal(lineSegments(model.axes, one?.values ?? [], xs, 0, 100).length, 1);
  // Trial 3 (infeasible) stops before the objective axis.
  assert.deepEqual(lineSegments(model.axes, three?.values ?? [], xs, 0, 100).map((run) => run.length), [3]);
});

test("the objective plot: a point per valued trial, the best-so-far records, the best trial", () => {
  const model = objectiveModel(STUDY, "loss", "MINIMIZE");
  assert.deepEqual(model.points.map((p) => p.trialId), ["1", "2", "4", "5"]);
  assert.deepEqual(model.points.map((p) => p.record), [true, true, false, true]);
  assert.deepEqual(model.best.map((p) => p.value), [0.8, 0.4, 0.4, 0.2]);
  assert.equal(model.bestTrialId, "5");
  assert.equal(model.points[2]?.stoppedEarly, true);
  assert.deepEqual(model.xAxis.domain, [1, 6]); // up to maxTrialCount
  const maximize = objectiveModel(STUDY, "loss", "MAXIMIZE");
  assert.equal(maximize.bestTrialId, "1");
  assert.deepEqual(maximize.points.map((p) => p.record), [true, false, false, false]);
  assert.equal(stepPath([[0, 10], [5, 8], [9, 8]]), "M0 10 H5 V8 H9 V8");
});

test("a log objective axis: a diverged trial no longer flattens the others; values ≤ 0 are left out", () => {
  const diverged: HyperparameterTuningJob = {
    ...STUDY,
    trials: [trial(1, 0.8), trial(2, 0.4), trial(3, 1e35), trial(4, 0), trial(5, 0.2)],
  };
  const linear = objectiveModel(diverged, "loss", "MINIMIZE");
  const spread = (model: ReturnType<typeof objectiveModel>, a: string, b: string): number => {
    const at = (id: string): number => model.yAxis.position(model.points.find((p) => p.trialId === id)?.value ?? null) ?? NaN;
    return Math.abs(at(a) - at(b));
  };
  assert.ok(spread(linear, "1", "5") < 1e-9); // 0.8 and 0.2 on one pixel beside 1e35
  const log = objectiveModel(diverged, "loss", "MINIMIZE", true);
  assert.equal(log.yAxis.kind, "log");
  assert.deepEqual(log.yAxis.domain, [0.1, 1e35]); // the decades around the positive values
  assert.ok(spread(log, "1", "5") > 0.01);
  assert.deepEqual(log.points.map((p) => p.trialId), ["1", "2", "3", "5"]);
  assert.equal(log.leftOut, 1); // trial 4's 0 has no place on a log axis
  assert.equal(linear.leftOut, 0);
  // the parallel coordinates' objective axis follows; a value ≤ 0 breaks that trial's line there
  const parallel = parallelModel(diverged, "loss", "MINIMIZE", true);
  const objective = parallel.axes.at(-1);
  assert.equal(objective?.kind, "log");
  assert.equal(objective?.position(0), null);
  // nothing positive: a log axis has nothing to span, the linear one stays
  const flat = objectiveModel({ ...STUDY, trials: [trial(1, 0), trial(2, -1)] }, "loss", "MINIMIZE", true);
  assert.equal(flat.yAxis.kind, "linear");
  assert.equal(flat.points.length, 2);
});

test("tuning routes, paths and links", () => {
  const parent = { project: "p1", location: "us-central1" };
  assert.equal(tuningJobPath(parent, "42"), "/v1/projects/p1/locations/us-central1/hyperparameterTuningJobs/42");
  assert.deepEqual(parseTuningJobName(`${PARENT}/hyperparameterTuningJobs/42`), { parent: { project: "default", location: "local" }, jobId: "42" });
  assert.equal(tuningJobsHref({ project: "default", location: "local" }), "#/tuning");
  assert.equal(tuningJobHref(parent, "42", { metric: "loss" }), "#/tuning/42?project=p1&location=us-central1&metric=loss");
  assert.equal(parseHash("#/tuning").page, "studies");
  const route = parseHash("#/tuning/42?metric=acc");
  assert.ok(route.page === "study" && route.jobId === "42" && route.query.get("metric") === "acc");
  assert.equal(parseHash("#/tuning/42/x").page, "notfound");
  const href = compareHref(["1001", "1005"]);
  assert.equal(href, "#/compare?runs=1001,1005");
  const parsed = parseHash(href);
  assert.ok(parsed.page === "compare");
  assert.deepEqual(parsed.runs, ["1001", "1005"]);
});

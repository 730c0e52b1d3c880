import assert from "node:assert/strict";
import { test } from "node:test";

import { Api, ApiError } from "../src/api";
import {
  isCancellable,
  isTerminal,
  jobPath,
  jobSeconds,
  LogTail,
  parseJobName,
  poolsSummary,
  replicaNames,
  trainingUnavailable,
  type CustomJob,
  type WorkerPoolSpec,
} from "../src/jobs";
import { jobHref, jobsHref, parentOf, parseHash } from "../src/router";

const pools: WorkerPoolSpec[] = [
  { machineSpec: { machineType: "" }, replicaCount: "1", containerSpec: { imageUri: "python" } },
  { machineSpec: { machineType: "a2-highgpu-1g", acceleratorType: "NVIDIA_TESLA_A100", acceleratorCount: 1 }, replicaCount: "2" },
  {},
  { machineSpec: { machineType: "n1-standard-4", acceleratorType: "ACCELERATOR_TYPE_UNSPECIFIED" }, replicaCount: 1 },
];

test("terminal states are the four a job never leaves; a CANCELLING job cannot be cancelled again", () => {
  for (const state of ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"]) {
    assert.ok(isTerminal(state), state);
    assert.ok(!isCancellable(state), state);
  }
  for (const state of ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING"]) {
    assert.ok(!isTerminal(state), state);
  }
  assert.ok(isCancellable("JOB_STATE_RUNNING"));
  assert.ok(isCancellable("JOB_STATE_QUEUED"));
  assert.ok(!isCancellable("JOB_STATE_CANCELLING"));
});

test("pools read as machine x replicas (the SDK's default machine, accelerators, skipped positions)", () => {
  assert.deepEqual(poolsSummary(pools), ["n1-standard-4 × 1", "a2-highgpu-1g + 1 × NVIDIA_TESLA_A100 × 2", "n1-standard-4 × 1"]);
  assert.deepEqual(replicaNames(pools), ["workerpool0-0", "workerpool1-0", "workerpool1-1", "workerpool3-0"]);
});

test("a job's name gives its parent and id; paths and links carry the parent", () => {
  const parsed = parseJobName("projects/p1/locations/us-central1/customJobs/123");
  assert.deepEqual(parsed, { parent: { project: "p1", location: "us-central1" }, jobId: "123" });
  assert.equal(parseJobName("customJobs/123"), null);
  const parent = { project: "p1", location: "us-central1" };
  assert.equal(jobPath(parent, "123", ":cancel"), "/v1/projects/p1/locations/us-central1/customJobs/123:cancel");
  assert.equal(jobsHref({ project: "default", location: "local" }), "#/jobs");
  assert.equal(jobHref(parent, "123", { replica: "workerpool1-0" }), "#/jobs/123?project=p1&location=us-central1&replica=workerpool1-0");
  assert.deepEqual(parentOf(new URLSearchParams("location=europe-west4")), { project: "default", location: "europe-west4" });
  assert.deepEqual(parseHash("#/jobs?location=x"), { page: "jobs", query: new URLSearchParams("location=x") });
  const route = parseHash("#/jobs/123?replica=workerpool0-0");
  assert.equal(route.page, "job");
  assert.equal(route.page === "job" && route.jobId, "123");
  assert.equal(parseHash("#/jobs/123/extra").page, "notfound");
});

test("a job's duration runs from its start, or from create to end when it never started", () => {
  const base: CustomJob = { name: "", displayName: "", jobSpec: { workerPoolSpecs: [] }, state: "JOB_STATE_FAILED" };
  const ran: CustomJob = { ...base, createTime: "2026-01-01T00:00:00Z", startTime: "2026-01-01T00:00:10Z", endTime: "2026-01-01T00:01:10Z" };
  assert.equal(jobSeconds(ran), 60);
  assert.equal(jobSeconds({ ...ran, startTime: null }), 70);
  assert.equal(jobSeconds({ ...ran, startTime: null, endTime: null }), null);
});

test("the log tail keeps the last lines within its limit and says it cut", () => {
  const tail = new LogTail(10);
  tail.append("one\n");
  tail.append("two\n");
  assert.equal(tail.value, "one\ntwo\n");
  assert.ok(!tail.truncated);
  tail.append("three\n");
  assert.equal(tail.value, "three\n"); // cut at a line start, never mid-line
  assert.ok(tail.truncated);
  tail.reset("x");
  assert.equal(tail.value, "x");
  assert.ok(!tail.truncated);
  tail.append("a-very-long-line-without-newline");
  const cut: string = tail.value;
  assert.equal(cut, "ut-newline"); // no line start to cut at: the last characters
});

test("the training API missing or down is told apart from a job that is not there", async () => {
  assert.ok(trainingUnavailable(new ApiError(0, "unavailable", "no answer")));
  assert.ok(trainingUnavailable(new ApiError(503, "unavailable", "edge")));
  assert.ok(trainingUnavailable(new ApiError(404, "not_found", "Not Found")));
  assert.ok(!trainingUnavailable(new ApiError(404, "NOT_FOUND", "customJob 1 not found")));
  assert.ok(!trainingUnavailable(new ApiError(403, "permission_denied", "no")));

  // A Vertex-shaped error body (google.rpc.Status: a number and the name) keeps the name.
  const original = globalThis.fetch;
  globalThis.fetch = async () =>
    new Response(JSON.stringify({ error: { code: 404, message: "customJob 1 not found", status: "NOT_FOUND" } }), { status: 404 });
  try {
    await assert.rejects(new Api("t").get("/v1/projects/default/locations/local/customJobs/1"), (error: unknown) => {
      assert.ok(error instanceof ApiError);
      assert.equal(error.code, "NOT_FOUND");
      assert.equal(error.message, "customJob 1 not found");
      return true;
    });
  } finally {
    globalThis.fetch = original;
  }
});

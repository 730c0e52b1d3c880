import assert from "node:assert/strict";
import { test } from "node:test";

import {
  byVersionDesc,
  isDefaultVersion,
  lineageLinks,
  type Model,
  modelIdOf,
  modelPath,
  modelVersionPath,
  parseModelName,
  userAliases,
} from "../src/models";
import { jobHref, modelHref, modelsHref, parseHash, runHref, tuningJobHref } from "../src/router";

const PARENT = "projects/default/locations/local";
const HREFS = { job: jobHref, tuningJob: (parent: { project: string; location: string }, id: string) => tuningJobHref(parent, id), run: (id: string) => runHref(id) };

function version(versionId: string, aliases: string[] = [], extra: Partial<Model> = {}): Model {
  return { name: `${PARENT}/models/m1`, displayName: "resnet", versionId, versionAliases: aliases, ...extra };
}

test("a model's name gives its parent and id (a version suffix too); paths escape the version's @", () => {
  assert.deepEqual(parseModelName("projects/p/locations/us-central1/models/m1"), { parent: { project: "p", location: "us-central1" }, modelId: "m1" });
  assert.equal(parseModelName("projects/p/locations/l/models/m1@3")?.modelId, "m1");
  assert.equal(parseModelName("models/m1"), null);
  assert.equal(modelIdOf(version("1")), "m1");
  const parent = { project: "default", location: "local" };
  assert.equal(modelPath(parent, "m1", ":listVersions"), "/v1/projects/default/locations/local/models/m1:listVersions");
  assert.equal(modelVersionPath(parent, "m1", "2"), "/v1/projects/default/locations/local/models/m1%402");
});

test("the default version is the one aliased default; user aliases leave it out", () => {
  const v = version("2", ["default", "prod", "candidate"]);
  assert.ok(isDefaultVersion(v));
  assert.deepEqual(userAliases(v), ["prod", "candidate"]);
  assert.ok(!isDefaultVersion(version("1", ["old"])));
  assert.deepEqual(userAliases({ name: "", displayName: "" }), []);
});

test("versions sort newest first by number (10 after 9)", () => {
  const sorted = [version("2"), version("10"), version("9"), version("1")].sort(byVersionDesc);
  assert.deepEqual(sorted.map((v) => v.versionId), ["10", "9", "2", "1"]);
});

test("a version's lineage reads as links in production order, pipelines without a page", () => {
  const imported = version("3", [], {
    lineage: {
      trainingPipeline: `${PARENT}/trainingPipelines/77`,
      customJob: "projects/p/locations/us-central1/customJobs/1005",
      hyperparameterTuningJob: `${PARENT}/hyperparameterTuningJobs/42`,
      run: "1005",
    },
  });
  assert.deepEqual(
    lineageLinks(imported, HREFS).map((link) => [link.kind, link.id, link.href]),
    [
      ["pipeline", "77", null],
      ["tuningJob", "42", "#/tuning/42"],
      ["customJob", "1005", "#/jobs/1005?project=p&location=us-central1"],
      ["run", "1005", "#/runs/1005"],
    ],
  );
  // An upload has no lineage; Vertex's own trainingPipeline field still counts.
  assert.deepEqual(lineageLinks(version("1"), HREFS), []);
  assert.deepEqual(
    lineageLinks(version("1", [], { trainingPipeline: `${PARENT}/trainingPipelines/5`, lineage: { customJob: "", run: "" } }), HREFS).map((l) => l.kind),
    ["pipeline"],
  );
});

test("model routes and links", () => {
  assert.equal(modelsHref({ project: "default", location: "local" }), "#/models");
  assert.equal(modelHref({ project: "default", location: "eu" }, "m 1", { version: "2" }), "#/models/m%201?location=eu&version=2");
  assert.equal(parseHash("#/models").page, "models");
  const route = parseHash("#/models/m%201?version=2");
  assert.ok(route.page === "model" && route.modelId === "m 1" && route.query.get("version") === "2");
  assert.equal(parseHash("#/models/m1/versions").page, "notfound");
});

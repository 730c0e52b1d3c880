// The model registry: the Model shape the console reads (schemas/src/mldiag_schemas/models.py,
// Vertex v1 JSON plus mldiag's `lineage`), its API paths, and the pure rules the Models pages
// use (which version is the default, the user's aliases, a version's lineage as links).

import { parseJobName } from "./jobs";
import { collectionPath, parseResourceName, resourceIdOf, resourcePath } from "./resources";
import type { Parent } from "./router";
import { parseTuningJobName } from "./tuning";

/** The alias naming each model's default version (schemas' DEFAULT_ALIAS). */
export const DEFAULT_ALIAS = "default";

export interface ModelLineage {
  trainingPipeline?: string;
  customJob?: string;
  hyperparameterTuningJob?: string;
  /** A run id (not a resource name). */
  run?: string;
}

export interface Model {
  name: string;
  versionId?: string;
  versionAliases?: string[];
  versionCreateTime?: string | null;
  versionUpdateTime?: string | null;
  displayName: string;
  description?: string;
  versionDescription?: string;
  artifactUri?: string;
  containerSpec?: { imageUri: string; command?: string[]; args?: string[] } | null;
  labels?: Record<string, string>;
  createTime?: string | null;
  updateTime?: string | null;
  trainingPipeline?: string;
  lineage?: ModelLineage | null;
}

export interface ListModelsResponse {
  models?: Model[];
  nextPageToken?: string;
}

export function modelsPath(parent: Parent): string {
  return collectionPath(parent, "models");
}

/** A model (its default version), `suffix` such as `:listVersions`. */
export function modelPath(parent: Parent, modelId: string, suffix = ""): string {
  return resourcePath(parent, "models", modelId, suffix);
}

/** One version: `.../models/{id}@{version}` (the `@` escaped, as the Vertex SDK sends it). */
export function modelVersionPath(parent: Parent, modelId: string, versionId: string): string {
  return resourcePath(parent, "models", `${modelId}@${versionId}`);
}

/** `projects/p/locations/l/models/m` → its parent and id (null if not that shape). */
export function parseModelName(name: string): { parent: Parent; modelId: string } | null {
  const parsed = parseResourceName(name, "models", true);
  return parsed && { parent: parsed.parent, modelId: parsed.id };
}

export function modelIdOf(model: Model): string {
  return resourceIdOf(model.name, "models", true);
}

export function isDefaultVersion(model: Model): boolean {
  return (model.versionAliases ?? []).includes(DEFAULT_ALIAS);
}

/** The aliases a user gave (`default` is shown as its own mark). */
export function userAliases(model: Model): string[] {
  return (model.versionAliases ?? []).filter((alias) => alias !== DEFAULT_ALIAS);
}

/** Versions newest first (ids are 1, 2, ... as strings: compared as numbers). */
export function byVersionDesc(a: Model, b: Model): number {
  const [x, y] = [Number(a.versionId), Number(b.versionId)];
  if (Number.isFinite(x) && Number.isFinite(y) && x !== y) return y - x;
  return (b.versionId ?? "").localeCompare(a.versionId ?? "");
}

export type LineageKind = "pipeline" | "customJob" | "tuningJob" | "run";

export interface LineageLink {
  kind: LineageKind;
  label: string;
  /** The id shown (a resource's last segment, or the run id). */
  id: string;
  /** The full resource name (or run id) as the API gave it. */
  resource: string;
  /** A console page for it, when there is one (training pipelines have none). */
  href: string | null;
}

/**
 * A version's lineage as links, in the order it was produced: pipeline, tuning job, custom
 * job, run. The training pipeline falls back to the Vertex field `trainingPipeline`.
 */
export function lineageLinks(model: Model, hrefs: { job(parent: Parent, id: string): string; tuningJob(parent: Parent, id: string): string; run(id: string): string }): LineageLink[] {
  const lineage = model.lineage ?? {};
  const out: LineageLink[] = [];
  const pipeline = lineage.trainingPipeline || model.trainingPipeline || "";
  if (pipeline) out.push({ kind: "pipeline", label: "Training pipeline", id: lastSegment(pipeline), resource: pipeline, href: null });
  const tuning = lineage.hyperparameterTuningJob ?? "";
  if (tuning) {
    const parsed = parseTuningJobName(tuning);
    out.push({ kind: "tuningJob", label: "Tuning job", id: lastSegment(tuning), resource: tuning, href: parsed ? hrefs.tuningJob(parsed.parent, parsed.jobId) : null });
  }
  const job = lineage.customJob ?? "";
  if (job) {
    const parsed = parseJobName(job);
    out.push({ kind: "customJob", label: "Custom job", id: lastSegment(job), resource: job, href: parsed ? hrefs.job(parsed.parent, parsed.jobId) : null });
  }
  const run = lineage.run ?? "";
  if (run) out.push({ kind: "run", label: "Run", id: run, resource: run, href: hrefs.run(run) });
  return out;
}

function lastSegment(name: string): string {
  return name.split("/").pop() ?? name;
}

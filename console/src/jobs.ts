// Training jobs: the CustomJob shapes the console reads (schemas/src/mldiag_schemas/jobs.py,
// Vertex v1 JSON), their API paths, and the pure rules the Jobs pages use (what is terminal,
// what may be cancelled, how pools read, a bounded log tail).

import { ApiError } from "./api";
import { secondsBetween } from "./format";
import { collectionPath, parseResourceName, resourceIdOf, resourcePath } from "./resources";
import type { Parent } from "./router";

export type JobState =
  | "JOB_STATE_UNSPECIFIED"
  | "JOB_STATE_QUEUED"
  | "JOB_STATE_PENDING"
  | "JOB_STATE_RUNNING"
  | "JOB_STATE_SUCCEEDED"
  | "JOB_STATE_FAILED"
  | "JOB_STATE_CANCELLING"
  | "JOB_STATE_CANCELLED"
  | "JOB_STATE_PAUSED"
  | "JOB_STATE_EXPIRED"
  | "JOB_STATE_UPDATING"
  | "JOB_STATE_PARTIALLY_SUCCEEDED";

export interface EnvVar {
  name: string;
  value?: string;
}

export interface WorkerPoolSpec {
  containerSpec?: { imageUri: string; command?: string[]; args?: string[]; env?: EnvVar[] } | null;
  pythonPackageSpec?: {
    executorImageUri: string;
    packageUris?: string[];
    pythonModule: string;
    args?: string[];
    env?: EnvVar[];
  } | null;
  machineSpec?: { machineType?: string; acceleratorType?: string; acceleratorCount?: number } | null;
  /** int64: a JSON string on the wire. */
  replicaCount?: string | number;
  diskSpec?: { bootDiskType?: string; bootDiskSizeGb?: number } | null;
}

export interface CustomJob {
  name: string;
  displayName: string;
  jobSpec: {
    workerPoolSpecs: WorkerPoolSpec[];
    scheduling?: {
      timeout?: string | null;
      restartJobOnWorkerRestart?: boolean;
      strategy?: string;
      disableRetries?: boolean;
    } | null;
    baseOutputDirectory?: { outputUriPrefix: string } | null;
    experiment?: string;
    experimentRun?: string;
  };
  state: JobState;
  createTime?: string | null;
  startTime?: string | null;
  endTime?: string | null;
  updateTime?: string | null;
  error?: { code: number; message?: string } | null;
  labels?: Record<string, string>;
}

export interface ListCustomJobsResponse {
  customJobs?: CustomJob[];
  nextPageToken?: string;
}

export type ReplicaState = "PENDING" | "RUNNING" | "SUCCEEDED" | "FAILED" | "RESTARTING" | "CANCELLED";

export interface Replica {
  name: string;
  pool: number;
  index: number;
  attempt: number;
  state: ReplicaState;
  executor?: string;
  host?: string;
  exitCode?: number | null;
  message?: string;
  startTime?: string | null;
  endTime?: string | null;
}

export interface ListReplicasResponse {
  replicas?: Replica[];
}

/** What each pool position means (schemas' POOL_ROLES). */
export const POOL_ROLES = ["chief", "worker", "ps", "evaluator"] as const;

/** The SDK's machine type when a pool names none (docs/training-design.md). */
export const DEFAULT_MACHINE_TYPE = "n1-standard-4";

const TERMINAL: ReadonlySet<string> = new Set([
  "JOB_STATE_SUCCEEDED",
  "JOB_STATE_FAILED",
  "JOB_STATE_CANCELLED",
  "JOB_STATE_EXPIRED",
]);

/** A terminal state never changes again (schemas' TERMINAL_JOB_STATES): stop refreshing. */
export function isTerminal(state: string): boolean {
  return TERMINAL.has(state);
}

/** Whether a cancel can still do something (a CANCELLING job is already on its way). */
export function isCancellable(state: string): boolean {
  return !isTerminal(state) && state !== "JOB_STATE_CANCELLING";
}

/** `JOB_STATE_RUNNING` → `RUNNING`. */
export function jobStateName(state: string): string {
  return state.replace(/^JOB_STATE_/, "");
}

export function jobsPath(parent: Parent): string {
  return collectionPath(parent, "customJobs");
}

export function jobPath(parent: Parent, jobId: string, suffix = ""): string {
  return resourcePath(parent, "customJobs", jobId, suffix);
}

/** `projects/p/locations/l/customJobs/123` → its parent and id (null if not that shape). */
export function parseJobName(name: string): { parent: Parent; jobId: string } | null {
  const parsed = parseResourceName(name, "customJobs");
  return parsed && { parent: parsed.parent, jobId: parsed.id };
}

export function jobIdOf(job: CustomJob): string {
  return resourceIdOf(job.name, "customJobs");
}

export function replicaCount(pool: WorkerPoolSpec): number {
  const count = Number(pool.replicaCount ?? 0);
  return Number.isFinite(count) ? count : 0;
}

/** A pool left empty (`{}`) to skip its position. */
export function isEmptyPool(pool: WorkerPoolSpec): boolean {
  return !pool.containerSpec && !pool.pythonPackageSpec && !pool.machineSpec && replicaCount(pool) === 0 && !pool.diskSpec;
}

/** One pool's machine: `n1-standard-8 + 2 × NVIDIA_L4`. */
export function machineOf(pool: WorkerPoolSpec): string {
  const spec = pool.machineSpec ?? {};
  const type = spec.machineType || DEFAULT_MACHINE_TYPE;
  const accelerator = spec.acceleratorType && spec.acceleratorType !== "ACCELERATOR_TYPE_UNSPECIFIED" ? spec.acceleratorType : "";
  return accelerator && spec.acceleratorCount ? `${type} + ${spec.acceleratorCount} × ${accelerator}` : type;
}

/** Each non-empty pool as `machine × replicas` (the list's pools column). */
export function poolsSummary(pools: WorkerPoolSpec[]): string[] {
  return pools.filter((pool) => !isEmptyPool(pool)).map((pool) => `${machineOf(pool)} × ${replicaCount(pool)}`);
}

/** Every replica the spec asks for, by Vertex's name (`workerpool1-0`), pool then index. */
export function replicaNames(pools: WorkerPoolSpec[]): string[] {
  return pools.flatMap((pool, position) => Array.from({ length: replicaCount(pool) }, (_, index) => `workerpool${position}-${index}`));
}

/** Seconds the job has run (from its start; a job that never started: from create to end). */
export function jobSeconds(job: CustomJob): number | null {
  if (job.startTime) return secondsBetween(job.startTime, job.endTime);
  if (job.createTime && job.endTime) return secondsBetween(job.createTime, job.endTime);
  return null;
}

/**
 * The training API is not behind this address (a 404 that is not the training API's own
 * Vertex-shaped `NOT_FOUND`: nothing routes the path), or it is down (the edge's 502/503/504,
 * or no answer at all).
 */
export function trainingUnavailable(error: unknown): boolean {
  if (!(error instanceof ApiError)) return false;
  if (error.status === 404) return error.code !== "NOT_FOUND";
  return [0, 502, 503, 504].includes(error.status);
}

/** The last `limit` characters of a growing log, cut at a line start, and whether it was cut. */
export class LogTail {
  private text = "";
  private cut = false;

  constructor(private readonly limit = 256 * 1024) {}

  get value(): string {
    return this.text;
  }

  /** Whether earlier output was dropped to stay within the limit. */
  get truncated(): boolean {
    return this.cut;
  }

  reset(text = ""): void {
    this.text = "";
    this.cut = false;
    this.append(text);
  }

  append(chunk: string): void {
    this.text += chunk;
    if (this.text.length <= this.limit) return;
    const start = this.text.length - this.limit;
    const newline = this.text.indexOf("\n", start);
    this.text = this.text.slice(newline >= 0 && newline < this.text.length - 1 ? newline + 1 : start);
    this.cut = true;
  }
}

// Hyperparameter tuning jobs: the shapes the console reads (schemas/src/mldiag_schemas/tuning.py,
// Vertex v1 JSON), their API paths, and the pure rules the Tuning pages use (a metric's goal,
// trials' objective values, the best so far, the search space flattened to axes).

import type { CustomJob } from "./jobs";
import { collectionPath, parseResourceName, resourceIdOf, resourcePath } from "./resources";
import type { Parent } from "./router";

/** Enums arrive as names (the console never asks for `enum-encoding=int`); numbers are read too. */
type Enum = string | number;

export interface MetricSpec {
  metricId: string;
  goal?: Enum;
}

export interface ParameterSpec {
  parameterId: string;
  doubleValueSpec?: { minValue: number; maxValue: number } | null;
  /** int64: strings on the wire. */
  integerValueSpec?: { minValue: string | number; maxValue: string | number } | null;
  categoricalValueSpec?: { values: string[] } | null;
  discreteValueSpec?: { values: number[] } | null;
  scaleType?: Enum;
  conditionalParameterSpecs?: { parameterSpec: ParameterSpec }[];
}

export interface StudySpec {
  metrics: MetricSpec[];
  parameters: ParameterSpec[];
  algorithm?: Enum;
  measurementSelectionType?: Enum;
  medianAutomatedStoppingSpec?: { useElapsedDuration?: boolean } | null;
}

export interface Measurement {
  elapsedDuration?: string | null;
  /** int64: a string on the wire. */
  stepCount?: string | number;
  metrics?: { metricId: string; value: number }[];
}

export type TrialState = "STATE_UNSPECIFIED" | "REQUESTED" | "ACTIVE" | "STOPPING" | "SUCCEEDED" | "INFEASIBLE";

export interface Trial {
  name?: string;
  id: string;
  state: TrialState | Enum;
  parameters?: { parameterId: string; value: number | string }[];
  finalMeasurement?: Measurement | null;
  measurements?: Measurement[];
  startTime?: string | null;
  endTime?: string | null;
  infeasibleReason?: string;
  customJob?: string;
  /** mldiag: median stopping ended it (the old AI Platform's `isTrialStoppedEarly`), when the API says. */
  stoppedEarly?: boolean;
  /** The old AI Platform's spelling of the same flag. */
  isTrialStoppedEarly?: boolean;
}

export interface HyperparameterTuningJob {
  name: string;
  displayName: string;
  studySpec: StudySpec;
  maxTrialCount: number;
  parallelTrialCount: number;
  maxFailedTrialCount?: number;
  trialJobSpec?: CustomJob["jobSpec"];
  trials?: Trial[];
  state: string;
  createTime?: string | null;
  startTime?: string | null;
  endTime?: string | null;
  updateTime?: string | null;
  error?: { code: number; message?: string } | null;
  labels?: Record<string, string>;
}

export interface ListHyperparameterTuningJobsResponse {
  hyperparameterTuningJobs?: HyperparameterTuningJob[];
  nextPageToken?: string;
}

export type Goal = "MAXIMIZE" | "MINIMIZE";

/** A metric's goal: Vertex reads UNSPECIFIED (and an absent goal) as MAXIMIZE. */
export function goalOf(metric: MetricSpec | undefined): Goal {
  const goal = metric?.goal;
  return goal === "MINIMIZE" || goal === 2 ? "MINIMIZE" : "MAXIMIZE";
}

/** Whether `a` beats `b` under `goal` (ties do not). */
export function better(a: number, b: number, goal: Goal): boolean {
  return goal === "MINIMIZE" ? a < b : a > b;
}

const TRIAL_STATES: readonly TrialState[] = ["STATE_UNSPECIFIED", "REQUESTED", "ACTIVE", "STOPPING", "SUCCEEDED", "INFEASIBLE"];

/** A trial's state by name (numbers mapped per schemas' TUNING_ENUM_NUMBERS). */
export function trialState(trial: Trial): TrialState {
  const state = trial.state;
  if (typeof state === "number") return TRIAL_STATES[state] ?? "STATE_UNSPECIFIED";
  return (TRIAL_STATES as readonly string[]).includes(state) ? (state as TrialState) : "STATE_UNSPECIFIED";
}

/** A trial never leaves these (schemas' TERMINAL_TRIAL_STATES). */
export function trialEnded(trial: Trial): boolean {
  const state = trialState(trial);
  return state === "SUCCEEDED" || state === "INFEASIBLE";
}

/** Trial ids are 1, 2, ... as strings; ordered as numbers (a non-number sorts last). */
export function trialNumber(trial: Trial): number {
  const number = Number(trial.id);
  return Number.isFinite(number) ? number : Number.MAX_SAFE_INTEGER;
}

export function byTrialId(a: Trial, b: Trial): number {
  return trialNumber(a) - trialNumber(b) || a.id.localeCompare(b.id);
}

/** The objective's value in a trial's final measurement (null: none, or not a finite number). */
export function objectiveValue(trial: Trial, metricId: string): number | null {
  const metric = trial.finalMeasurement?.metrics?.find((m) => m.metricId === metricId);
  return metric && typeof metric.value === "number" && Number.isFinite(metric.value) ? metric.value : null;
}

export interface ObjectivePoint {
  trialId: string;
  /** The trial's id as a number (the x axis). */
  x: number;
  value: number;
}

/** Every trial with a final value of the objective, by trial id. */
export function objectivePoints(trials: Trial[], metricId: string): ObjectivePoint[] {
  return [...trials]
    .sort(byTrialId)
    .flatMap((trial) => {
      const value = objectiveValue(trial, metricId);
      return value === null ? [] : [{ trialId: trial.id, x: trialNumber(trial), value }];
    });
}

/** The best value so far at each point (points in trial order): the running max or min. */
export function bestSoFar(points: ObjectivePoint[], goal: Goal): ObjectivePoint[] {
  const out: ObjectivePoint[] = [];
  let best: ObjectivePoint | null = null;
  for (const point of points) {
    if (best === null || better(point.value, best.value, goal)) best = point;
    out.push({ trialId: best.trialId, x: point.x, value: best.value });
  }
  return out;
}

/** The trial with the best final value of the objective (the earliest on a tie). */
export function bestTrial(trials: Trial[], metricId: string, goal: Goal): { trial: Trial; value: number } | null {
  let best: { trial: Trial; value: number } | null = null;
  for (const trial of [...trials].sort(byTrialId)) {
    const value = objectiveValue(trial, metricId);
    if (value !== null && (best === null || better(value, best.value, goal))) best = { trial, value };
  }
  return best;
}

export interface TrialCounts {
  /** Trials that ended (SUCCEEDED or INFEASIBLE). */
  done: number;
  /** What the job asks for (`maxTrialCount`). */
  total: number;
  running: number;
  succeeded: number;
  infeasible: number;
}

export function trialCounts(job: HyperparameterTuningJob): TrialCounts {
  const trials = job.trials ?? [];
  const count = (state: TrialState): number => trials.filter((trial) => trialState(trial) === state).length;
  const succeeded = count("SUCCEEDED");
  const infeasible = count("INFEASIBLE");
  return {
    done: succeeded + infeasible,
    total: Number(job.maxTrialCount) || trials.length,
    running: trials.length - succeeded - infeasible,
    succeeded,
    infeasible,
  };
}

/** The study's objective (its first metric) and that metric's goal. */
export function primaryMetric(spec: StudySpec | undefined): { metricId: string; goal: Goal } | null {
  const metric = spec?.metrics?.[0];
  return metric ? { metricId: metric.metricId, goal: goalOf(metric) } : null;
}

/** The search space as a flat list: every parameter, then its conditional children (depth first). */
export function flattenParameters(parameters: ParameterSpec[]): ParameterSpec[] {
  const out: ParameterSpec[] = [];
  const seen = new Set<string>();
  const visit = (spec: ParameterSpec): void => {
    if (!seen.has(spec.parameterId)) {
      seen.add(spec.parameterId);
      out.push(spec);
    }
    for (const child of spec.conditionalParameterSpecs ?? []) visit(child.parameterSpec);
  };
  parameters.forEach(visit);
  return out;
}

export type ParameterKind = "DOUBLE" | "INTEGER" | "DISCRETE" | "CATEGORICAL";

export function parameterKind(spec: ParameterSpec): ParameterKind {
  if (spec.categoricalValueSpec) return "CATEGORICAL";
  if (spec.discreteValueSpec) return "DISCRETE";
  if (spec.integerValueSpec) return "INTEGER";
  return "DOUBLE";
}

export type Scale = "linear" | "log" | "reverse_log";

/** How a numeric parameter's values are spread (UNSPECIFIED, like Vertex: no scaling = linear). */
export function scaleOf(spec: ParameterSpec): Scale {
  const scale = spec.scaleType;
  if (scale === "UNIT_LOG_SCALE" || scale === 2) return "log";
  if (scale === "UNIT_REVERSE_LOG_SCALE" || scale === 3) return "reverse_log";
  return "linear";
}

/** A numeric parameter's bounds from its spec (null for CATEGORICAL). */
export function parameterBounds(spec: ParameterSpec): [number, number] | null {
  if (spec.doubleValueSpec) return [Number(spec.doubleValueSpec.minValue), Number(spec.doubleValueSpec.maxValue)];
  if (spec.integerValueSpec) return [Number(spec.integerValueSpec.minValue), Number(spec.integerValueSpec.maxValue)];
  const values = spec.discreteValueSpec?.values;
  if (values?.length) return [Math.min(...values), Math.max(...values)];
  return null;
}

/** A trial's value of one parameter (absent: a conditional parameter its parent did not enable). */
export function parameterValue(trial: Trial, parameterId: string): number | string | null {
  return trial.parameters?.find((p) => p.parameterId === parameterId)?.value ?? null;
}

/** How a trial's value of a parameter reads (integers without `.0`, doubles to 4 digits). */
export function formatParameter(value: number | string | null): string {
  if (value === null) return "—";
  if (typeof value === "string") return value;
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  const rounded = Number(value.toPrecision(4));
  return abs !== 0 && (abs < 1e-3 || abs >= 1e6) ? rounded.toExponential() : String(rounded);
}

/** Median stopping ended it: the API's flag when it gives one. */
export function stoppedEarly(trial: Trial): boolean {
  return trial.stoppedEarly === true || trial.isTrialStoppedEarly === true;
}

/** `projects/p/locations/l/customJobs/123` → `123`: the trial's custom job, which is its run. */
export function trialJobId(trial: Trial): string | null {
  const match = /\/customJobs\/([^/]+)$/.exec(trial.customJob ?? "");
  return match?.[1] ?? null;
}

export function tuningJobsPath(parent: Parent): string {
  return collectionPath(parent, "hyperparameterTuningJobs");
}

export function tuningJobPath(parent: Parent, jobId: string, suffix = ""): string {
  return resourcePath(parent, "hyperparameterTuningJobs", jobId, suffix);
}

/** `projects/p/locations/l/hyperparameterTuningJobs/7` → its parent and id (null if not that shape). */
export function parseTuningJobName(name: string): { parent: Parent; jobId: string } | null {
  const parsed = parseResourceName(name, "hyperparameterTuningJobs");
  return parsed && { parent: parsed.parent, jobId: parsed.id };
}

export function tuningJobIdOf(job: HyperparameterTuningJob): string {
  return resourceIdOf(job.name, "hyperparameterTuningJobs");
}

// The data behind a study's two plots, shaped without the DOM: the objective over trials (points
// and the best-so-far step line) and the parallel coordinates (one axis per parameter, then the
// objective; one line per trial, broken where a conditional parameter is absent).

import { type Axis, categoryAxis, goodness, linearAxis, logValueAxis, niceTicks, numericAxis, numericExtent, valueAxis } from "./scales";
import {
  bestSoFar,
  byTrialId,
  flattenParameters,
  type Goal,
  type HyperparameterTuningJob,
  objectivePoints,
  objectiveValue,
  parameterBounds,
  parameterKind,
  type ParameterSpec,
  parameterValue,
  scaleOf,
  stoppedEarly,
  type Trial,
  trialJobId,
  trialState,
  type TrialState,
} from "./tuning";

/** Discrete values are the ticks themselves when there are at most this many. */
const MAX_VALUE_TICKS = 8;

/** One parameter's axis: its spec's domain (widened to any value a trial holds outside it). */
export function parameterAxis(spec: ParameterSpec, trials: Trial[]): Axis {
  const id = spec.parameterId;
  const observed = trials.map((trial) => parameterValue(trial, id)).filter((value) => value !== null);
  if (parameterKind(spec) === "CATEGORICAL") {
    const values = spec.categoricalValueSpec?.values ?? [];
    return categoryAxis(id, id, [...values, ...observed.map(String).filter((value) => !values.includes(value))]);
  }
  const bounds = parameterBounds(spec);
  const extent = numericExtent([...(bounds ?? []), ...observed]) ?? [0, 1];
  const discrete = spec.discreteValueSpec?.values ?? [];
  const options: { integer?: boolean; ticks?: number[] } = {};
  if (parameterKind(spec) === "INTEGER") options.integer = true;
  if (discrete.length > 0 && discrete.length <= MAX_VALUE_TICKS) options.ticks = discrete;
  return numericAxis(id, id, scaleOf(spec), extent[0], extent[1], options);
}

export interface ParallelRow {
  trialId: string;
  /** The trial's custom job (its run), when it has one. */
  jobId: string | null;
  state: TrialState;
  stoppedEarly: boolean;
  /** One per axis, parameters then the objective; null where the trial has no value. */
  values: (number | string | null)[];
  objective: number | null;
  /** 0 the worst objective seen, 1 the best; null without an objective value. */
  goodness: number | null;
}

export interface ParallelModel {
  axes: Axis[];
  rows: ParallelRow[];
}

/** The objective's axis: linear, or log (`logScale`: values ≤ 0 then have no place on it). */
function objectiveAxisOf(id: string, label: string, values: number[], logScale: boolean): Axis {
  return logScale ? logValueAxis(id, label, values) : valueAxis(id, label, values);
}

/** The parallel coordinates of a study: an axis per parameter (search-space order), then the objective. */
export function parallelModel(job: HyperparameterTuningJob, metricId: string, goal: Goal, logScale = false): ParallelModel {
  const trials = [...(job.trials ?? [])].sort(byTrialId);
  const specs = flattenParameters(job.studySpec?.parameters ?? []);
  const objectives = trials.map((trial) => objectiveValue(trial, metricId));
  const finite = objectives.filter((value): value is number => value !== null);
  const objectiveAxis = objectiveAxisOf(metricId, `${metricId} (${goal === "MINIMIZE" ? "min" : "max"})`, finite, logScale);
  const [lo, hi] = numericExtent(finite) ?? [0, 0];
  const axes = [...specs.map((spec) => parameterAxis(spec, trials)), objectiveAxis];
  const rows = trials.map((trial, i): ParallelRow => {
    const objective = objectives[i] ?? null;
    return {
      trialId: trial.id,
      jobId: trialJobId(trial),
      state: trialState(trial),
      stoppedEarly: stoppedEarly(trial),
      values: [...specs.map((spec) => parameterValue(trial, spec.parameterId)), objective],
      objective,
      goodness: objective === null ? null : goodness(objective, lo, hi, goal),
    };
  });
  return { axes, rows };
}

export type Point = [number, number];

/**
 * A line through the axes at `xs`, from bottom (`bottom`, position 0) to top (`top`, 1),
 * broken into runs where a value is absent or off its axis.
 */
export function lineSegments(axes: Axis[], values: (number | string | null)[], xs: number[], top: number, bottom: number): Point[][] {
  const segments: Point[][] = [];
  let run: Point[] = [];
  axes.forEach((axis, i) => {
    const at = axis.position(values[i] ?? null);
    if (at === null) {
      if (run.length) segments.push(run);
      run = [];
      return;
    }
    run.push([xs[i] ?? 0, bottom - at * (bottom - top)]);
  });
  if (run.length) segments.push(run);
  return segments;
}

/** SVG path data for segments (a lone point becomes a dot under a round line cap). */
export function pathData(segments: Point[][]): string {
  return segments
    .map((points) => points.map(([x, y], i) => `${i ? "L" : "M"}${round(x)} ${round(y)}`).join(" ") + (points.length === 1 ? " h0" : ""))
    .join(" ");
}

/** A step line through points in x order: flat until the next point, then straight up or down. */
export function stepPath(points: Point[]): string {
  return points.map(([x, y], i) => (i === 0 ? `M${round(x)} ${round(y)}` : `H${round(x)} V${round(y)}`)).join(" ");
}

function round(value: number): number {
  return Math.round(value * 10) / 10;
}

export interface ScatterPoint {
  trialId: string;
  jobId: string | null;
  x: number;
  value: number;
  stoppedEarly: boolean;
  /** Whether this trial is the best so far when it ended. */
  record: boolean;
}

export interface ObjectiveModel {
  xAxis: Axis;
  yAxis: Axis;
  points: ScatterPoint[];
  /** The best value so far at each point's trial. */
  best: { x: number; value: number }[];
  /** The trial with the best value overall. */
  bestTrialId: string | null;
  /** Trials with a value a log axis cannot place (≤ 0), not drawn. */
  leftOut: number;
}

/** The objective over trials: one point per trial with a final value, x = trial id. */
export function objectiveModel(job: HyperparameterTuningJob, metricId: string, goal: Goal, logScale = false): ObjectiveModel {
  const trials = job.trials ?? [];
  const byId = new Map(trials.map((trial) => [trial.id, trial]));
  const all = objectivePoints(trials, metricId);
  // On a log axis a value ≤ 0 has no place: such trials are left out (and counted).
  const placeable = logScale && all.some((point) => point.value > 0);
  const points = placeable ? all.filter((point) => point.value > 0) : all;
  const best = bestSoFar(points, goal);
  const last = Math.max(1, Number(job.maxTrialCount) || 0, ...points.map((point) => point.x).filter(Number.isFinite));
  const xAxis = linearAxis("trial", "trial", 1, last, { integer: true, ticks: niceTicks(1, last, 8).filter(Number.isInteger) });
  const yAxis = objectiveAxisOf(metricId, metricId, points.map((point) => point.value), logScale);
  let previous: string | null = null;
  const scatter = points.map((point, i): ScatterPoint => {
    const trial = byId.get(point.trialId);
    const holder = best[i]?.trialId ?? null;
    const record = holder === point.trialId && holder !== previous;
    previous = holder;
    return {
      trialId: point.trialId,
      jobId: trial ? trialJobId(trial) : null,
      x: point.x,
      value: point.value,
      stoppedEarly: trial ? stoppedEarly(trial) : false,
      record,
    };
  });
  return {
    xAxis,
    yAxis,
    points: scatter,
    best: best.map((point) => ({ x: point.x, value: point.value })),
    bestTrialId: best.at(-1)?.trialId ?? null,
    leftOut: all.length - points.length,
  };
}

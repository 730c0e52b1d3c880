// Axes for the SVG plots of the Tuning pages: where a value sits on an axis (0 at the bottom,
// 1 at the top) and which ticks to draw, for linear, log and reverse-log numbers and for
// categories (evenly spaced), and a colour ramp from the worst value to the best.

import { formatTick, formatTicks } from "./format";

export interface Tick {
  /** 0 (bottom) to 1 (top). */
  at: number;
  label: string;
}

export type AxisKind = "linear" | "log" | "reverse_log" | "category";

export interface Axis {
  id: string;
  label: string;
  kind: AxisKind;
  /** The values the axis spans (numbers: its two ends; categories: each, bottom to top). */
  domain: [number, number] | string[];
  ticks: Tick[];
  /** Where a value sits, 0 to 1; null for no value or one the axis cannot place. */
  position(value: number | string | null | undefined): number | null;
}

/** A round step (1, 2 or 5 × 10^k) near `span / count`. */
export function niceStep(span: number, count: number): number {
  if (!(span > 0) || !(count > 0)) return 1;
  const raw = span / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const fraction = raw / power;
  return (fraction < 1.5 ? 1 : fraction < 3.5 ? 2 : fraction < 7.5 ? 5 : 10) * power;
}

/** Round values inside [min, max], about `count` of them (never outside the range). */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  if (min === max) return [min];
  const [lo, hi] = min < max ? [min, max] : [max, min];
  const step = niceStep(hi - lo, count);
  const decimals = Math.max(0, -Math.floor(Math.log10(step)) + 1);
  const out: number[] = [];
  for (let i = Math.ceil(lo / step - 1e-9); i * step <= hi + step * 1e-9; i++) {
    out.push(Number((i * step).toFixed(Math.min(decimals, 20))));
  }
  return out;
}

/** The range of the finite numbers among `values` (null when there are none). */
export function numericExtent(values: Iterable<unknown>): [number, number] | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const value of values) {
    const number = typeof value === "number" ? value : typeof value === "string" && value.trim() !== "" ? Number(value) : NaN;
    if (!Number.isFinite(number)) continue;
    lo = Math.min(lo, number);
    hi = Math.max(hi, number);
  }
  return lo <= hi ? [lo, hi] : null;
}

function asNumber(value: number | string | null | undefined): number | null {
  if (value === null || value === undefined) return null;
  const number = typeof value === "number" ? value : value.trim() === "" ? NaN : Number(value);
  return Number.isFinite(number) ? number : null;
}

function clamp01(value: number): number {
  return Math.min(1, Math.max(0, value));
}

/** A linear axis over [min, max] (a single value sits in the middle). */
export function linearAxis(id: string, label: string, min: number, max: number, options: { integer?: boolean; ticks?: number[] } = {}): Axis {
  const span = max - min;
  const position = (value: number | string | null | undefined): number | null => {
    const number = asNumber(value);
    if (number === null) return null;
    return span > 0 ? clamp01((number - min) / span) : 0.5;
  };
  let values = options.ticks ?? niceTicks(min, max, 5);
  if (options.integer) values = values.filter(Number.isInteger);
  if (values.length === 0) values = min === max ? [min] : [min, max];
  return { id, label, kind: "linear", domain: [min, max], position, ticks: ticksAt(values, position) };
}

/** A log axis over [min, max] (both > 0); ticks at the powers of ten inside, else at the ends and middle. */
export function logAxis(id: string, label: string, min: number, max: number): Axis {
  const [lo, hi] = [Math.log(min), Math.log(max)];
  const position = (value: number | string | null | undefined): number | null => {
    const number = asNumber(value);
    if (number === null || number <= 0) return null;
    return hi > lo ? clamp01((Math.log(number) - lo) / (hi - lo)) : 0.5;
  };
  const powers: number[] = [];
  for (let k = Math.ceil(Math.log10(min) - 1e-9); 10 ** k <= max * (1 + 1e-9); k++) powers.push(Number(`1e${k}`));
  const stride = Math.ceil(powers.length / 6);
  let values = powers.filter((_, i) => i % stride === 0);
  if (values.length < 2) values = min === max ? [min] : [min, Math.sqrt(min * max), max];
  return { id, label, kind: "log", domain: [min, max], position, ticks: ticksAt(values, position) };
}

/**
 * Vertex's UNIT_REVERSE_LOG_SCALE over [min, max] (min > 0): log spacing mirrored, so the top
 * of the range is spread out: position = 1 − (ln(max + min − v) − ln min) / (ln max − ln min).
 */
export function reverseLogAxis(id: string, label: string, min: number, max: number): Axis {
  const [lo, hi] = [Math.log(min), Math.log(max)];
  const position = (value: number | string | null | undefined): number | null => {
    const number = asNumber(value);
    if (number === null) return null;
    const mirrored = max + min - number;
    if (mirrored <= 0) return null;
    return hi > lo ? clamp01(1 - (Math.log(mirrored) - lo) / (hi - lo)) : 0.5;
  };
  // Ticks evenly spaced on the axis, labelled with the value there.
  const values = hi > lo ? [0, 0.25, 0.5, 0.75, 1].map((at) => max + min - Math.exp(lo + (1 - at) * (hi - lo))) : [min];
  return {
    id,
    label,
    kind: "reverse_log",
    domain: [min, max],
    position,
    ticks: values.map((value) => ({ at: position(value) ?? 0, label: formatTick(Number(value.toPrecision(3))) })),
  };
}

/** Categories evenly spaced, the first at the bottom (one alone sits in the middle). */
export function categoryAxis(id: string, label: string, values: string[]): Axis {
  const unique = [...new Set(values)];
  const index = new Map(unique.map((value, i) => [value, i]));
  const position = (value: number | string | null | undefined): number | null => {
    if (value === null || value === undefined) return null;
    const i = index.get(String(value));
    if (i === undefined) return null;
    return unique.length > 1 ? i / (unique.length - 1) : 0.5;
  };
  return {
    id,
    label,
    kind: "category",
    domain: unique,
    position,
    ticks: unique.map((value) => ({ at: position(value) ?? 0.5, label: value })),
  };
}

function ticksAt(values: number[], position: (value: number) => number | null): Tick[] {
  const labels = formatTicks(values);
  return values.flatMap((value, i) => {
    const at = position(value);
    return at === null ? [] : [{ at, label: labels[i] ?? formatTick(value) }];
  });
}

/**
 * A numeric axis of `scale` over [min, max]; log scales need min > 0 and fall back to
 * linear otherwise (a spec that allows 0 cannot be drawn on a log axis).
 */
export function numericAxis(id: string, label: string, scale: "linear" | "log" | "reverse_log", min: number, max: number, options: { integer?: boolean; ticks?: number[] } = {}): Axis {
  if (scale !== "linear" && min > 0 && max > 0) return scale === "log" ? logAxis(id, label, min, max) : reverseLogAxis(id, label, min, max);
  return linearAxis(id, label, min, max, options);
}

/** The objective's axis: its observed range, a little padded so no line sits on the frame. */
export function valueAxis(id: string, label: string, values: number[]): Axis {
  const extent = numericExtent(values);
  if (!extent) return linearAxis(id, label, 0, 1);
  const [min, max] = extent;
  const pad = max > min ? (max - min) * 0.05 : Math.abs(min) * 0.1 || 1;
  return linearAxis(id, label, min - pad, max + pad, { ticks: niceTicks(min - pad, max + pad, 5) });
}

/**
 * The objective's axis on a log scale: the decades around its positive values (a diverged
 * trial at 1e35 no longer flattens the others); values ≤ 0 have no place on it (null).
 * Linear (`valueAxis`) when no value is positive.
 */
export function logValueAxis(id: string, label: string, values: number[]): Axis {
  const extent = numericExtent(values.filter((value) => value > 0));
  if (!extent) return valueAxis(id, label, values);
  const { range } = decadeTicks(extent[0], extent[1]);
  return logAxis(id, label, range[0], range[1]);
}

/** How good `value` is within [min, max] under the goal: 0 the worst seen, 1 the best. */
export function goodness(value: number, min: number, max: number, goal: "MAXIMIZE" | "MINIMIZE"): number {
  if (!(max > min)) return 1;
  const t = clamp01((value - min) / (max - min));
  return goal === "MINIMIZE" ? 1 - t : t;
}

/** From the worst (amber) through red and violet to the best (deep blue). */
export const RAMP = ["#fbbf24", "#f97316", "#db2777", "#7c3aed", "#1d4ed8"] as const;

/** The ramp's colour at `t` (0 worst, 1 best), as `#rrggbb`. */
export function rampColor(t: number): string {
  const x = clamp01(Number.isFinite(t) ? t : 0) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  const [a, b] = [rgb(RAMP[i] ?? RAMP[0]), rgb(RAMP[i + 1] ?? RAMP[0])];
  return `#${a.map((channel, k) => Math.round(channel + ((b[k] ?? channel) - channel) * f).toString(16).padStart(2, "0")).join("")}`;
}

function rgb(hex: string): number[] {
  return [1, 3, 5].map((start) => parseInt(hex.slice(start, start + 2), 16));
}

/**
 * A log chart's y range and ticks: from the power of ten at or below `min` to the one at or
 * above `max` (both > 0), a tick at each power of ten (every other one, or sparser, past seven).
 */
export function decadeTicks(min: number, max: number): { range: [number, number]; ticks: number[] } {
  if (!(min > 0) || !(max > 0) || !Number.isFinite(min) || !Number.isFinite(max)) return { range: [0.1, 10], ticks: [0.1, 1, 10] };
  const low = Math.floor(Math.log10(Math.min(min, max)) + 1e-9);
  let high = Math.ceil(Math.log10(Math.max(min, max)) - 1e-9);
  if (high === low) high = low + 1;
  const stride = Math.ceil((high - low + 1) / 7);
  const ticks: number[] = [];
  for (let k = low; k <= high; k += stride) ticks.push(Number(`1e${k}`));
  return { range: [Number(`1e${low}`), Number(`1e${high}`)], ticks };
}

/** The values a log axis can place (> 0, finite; the rest become gaps) and how many were dropped. */
export function positiveOnly(values: readonly (number | null)[]): { values: (number | null)[]; dropped: number } {
  let dropped = 0;
  const kept = values.map((value) => {
    if (value === null || Number.isNaN(value)) return null; // a gap or a NaN: not a log question
    if (value > 0 && Number.isFinite(value)) return value;
    dropped++;
    return null;
  });
  return { values: kept, dropped };
}

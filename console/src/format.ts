// Formatting for people: times, durations, numbers, config values.

import type { Json } from "./types";

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

const twoDigits = (n: number): string => String(n).padStart(2, "0");

/** A local time of day, 24-hour: "14:05:09". */
export function formatClock(date: Date): string {
  return `${twoDigits(date.getHours())}:${twoDigits(date.getMinutes())}:${twoDigits(date.getSeconds())}`;
}

/**
 * A moment in local time, as the console's English writes it: "14:05:09" today, "Dec 4
 * 14:05:09" this year, "Dec 4, 2025 14:05:09" before. Written by hand rather than with Intl:
 * a first visit would load ICU's date data (~15 ms) before the run's header could show.
 */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const now = new Date();
  const time = formatClock(date);
  if (date.toDateString() === now.toDateString()) return time;
  const day = `${MONTHS[date.getMonth()]} ${date.getDate()}`;
  return date.getFullYear() === now.getFullYear() ? `${day} ${time}` : `${day}, ${date.getFullYear()} ${time}`;
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  const s = Math.round(seconds);
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  return `${m}m ${s % 60}s`;
}

export function secondsBetween(start: string, end: string | null | undefined): number {
  const to = end ? Date.parse(end) : Date.now();
  return Math.max(0, (to - Date.parse(start)) / 1000);
}

export function formatNumber(value: number | null | undefined, digits = 4): string {
  if (value === null || value === undefined) return "—";
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Inf" : "−Inf";
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return groupThousands(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(Math.max(1, digits - 2));
  return Number(value.toPrecision(digits)).toString();
}

/**
 * An integer with commas between thousands, as `toLocaleString("en-US")` writes it, without
 * loading a number formatter (a chart's step axis on a first visit).
 */
function groupThousands(value: number): string {
  const sign = value < 0 || Object.is(value, -0) ? "-" : "";
  return sign + String(Math.abs(value)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** Short tick labels: 1.2k, 3.4M, 5e-5 (`precision` significant digits, 3 by default). */
export function formatTick(value: number, precision = 3): string {
  const abs = Math.abs(value);
  if (abs === 0) return "0";
  const exponent = Math.max(0, precision - 3);
  if (abs >= 1e12) return value.toExponential(exponent).replace("+", ""); // "1e36": a diverged run's axis
  if (abs >= 1e9) return `${trim(value / 1e9, precision)}G`;
  if (abs >= 1e6) return `${trim(value / 1e6, precision)}M`;
  if (abs >= 1e4) return `${trim(value / 1e3, precision)}k`;
  if (abs < 1e-3) return value.toExponential(exponent);
  return trim(value, precision);
}

/**
 * An axis's tick labels: as short as formatTick makes them, with more digits where two would
 * read the same (100 and 100.5 are not both "101"; 12,340 and 12,345 not both "12.3k").
 */
export function formatTicks(values: readonly number[]): string[] {
  for (let precision = 3; precision < 16; precision++) {
    const labels = values.map((value) => formatTick(value, precision));
    if (labels.every((label, i) => i === 0 || label !== labels[i - 1])) return labels;
  }
  return values.map((value) => formatTick(value, 16));
}

function trim(value: number, precision: number): string {
  return Number(value.toPrecision(precision)).toString();
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

export function formatJson(value: Json): string {
  if (typeof value === "string") return value;
  if (typeof value === "number") return String(value); // configs: exactly as recorded
  return JSON.stringify(value);
}

export function percent(fraction: number): string {
  return `${(fraction * 100).toFixed(fraction >= 0.995 || fraction < 0.1 ? 1 : 0)}%`;
}

export function shortState(state: string): string {
  return state.replace(/^STATE_/, "");
}

// A chart's series as CSV, built in the browser from the buckets the chart drew: long format,
// one row per drawn point and line (`series,step,time,value,min,max,points`), raw values (never
// smoothed), RFC 4180 quoting, NaN and infinities written as NaN, Inf and -Inf.

import type { MetricBucket } from "./types";

export const CSV_HEADER = ["series", "step", "time", "value", "min", "max", "points"] as const;

/** A number as CSV writes it: empty for none, `NaN`, `Inf`, `-Inf`, else JavaScript's shortest exact form. */
export function csvNumber(value: number | null | undefined): string {
  if (value === null || value === undefined) return "";
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

/** A field quoted when it holds a comma, a quote or a line break (quotes doubled). */
export function csvField(text: string): string {
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export interface CsvLine {
  label: string;
  buckets: readonly MetricBucket[];
}

/**
 * The lines' points: a bucket of one point is that point (step, time, value, NaN included); a
 * bucket of several (a downsampled chart) is its last step and time, the mean, min and max of
 * its non-NaN values (NaN when it held nothing else). Rows end with CRLF, as RFC 4180 says.
 */
export function toCsv(lines: readonly CsvLine[]): string {
  const rows = [CSV_HEADER.join(",")];
  for (const line of lines) {
    for (const bucket of line.buckets) {
      const value = bucket.count === 1 ? bucket.last : (bucket.mean ?? (bucket.nanCount > 0 ? NaN : null));
      rows.push(
        [
          csvField(line.label),
          String(bucket.lastStep),
          csvField(bucket.lastTime ?? ""),
          csvNumber(value),
          csvNumber(bucket.min),
          csvNumber(bucket.max),
          String(bucket.count),
        ].join(","),
      );
    }
  }
  return rows.join("\r\n") + "\r\n";
}

/** A file name for a metric's CSV: `<prefix>-<metric>.csv`, unsafe characters as `_`. */
export function csvFileName(prefix: string, metric: string): string {
  return `${`${prefix}-${metric}`.replace(/[^A-Za-z0-9._-]+/g, "_")}.csv`;
}

// Several pairwise config diffs (base vs each other run) merged into one table.

import type { ConfigDifference, Json } from "./types";

export interface DiffRow {
  section: string;
  key: string;
  /** Per run, base first; undefined where the run lacks the key. */
  values: (Json | undefined)[];
  changed: boolean[];
}

/**
 * One row per key that differs in any run: the base run's value, then each other run's.
 * A key missing from one pairwise diff is unchanged there: that run has the base's value.
 */
export function mergeDiffs(diffs: ConfigDifference[][]): DiffRow[] {
  const rows = new Map<string, DiffRow & { seen: Set<number> }>();
  const runs = diffs.length + 1;
  diffs.forEach((differences, index) => {
    const run = index + 1;
    for (const d of differences) {
      const id = `${d.section}\u0000${d.key}`;
      let row = rows.get(id);
      if (!row) {
        row = {
          section: d.section,
          key: d.key,
          values: new Array<Json | undefined>(runs).fill(undefined),
          changed: new Array<boolean>(runs).fill(false),
          seen: new Set(),
        };
        rows.set(id, row);
      }
      if (d.change !== "ADDED") row.values[0] = d.baseValue;
      row.values[run] = d.change === "REMOVED" ? undefined : d.otherValue;
      row.changed[run] = d.change !== "UNCHANGED";
      row.seen.add(run);
    }
  });
  for (const row of rows.values()) {
    for (let run = 1; run < runs; run++) if (!row.seen.has(run)) row.values[run] = row.values[0];
  }
  return [...rows.values()]
    .map(({ section, key, values, changed }) => ({ section, key, values, changed }))
    .sort((a, b) => a.section.localeCompare(b.section) || a.key.localeCompare(b.key));
}

// Chart smoothing as TensorBoard does it: an exponential moving average, debiased so that the
// first points are not dragged towards zero, with a weight from 0 (off) to 0.99. The weight is
// shareable (the page's URL) and remembered per browser (localStorage).

export const MAX_SMOOTHING = 0.99;
const STORAGE_KEY = "mldiag.smoothing";

/** A weight within [0, 0.99] (anything else, or not a number, reads as 0: off). */
export function clampSmoothing(weight: number): number {
  if (!Number.isFinite(weight) || weight <= 0) return 0;
  return Math.min(MAX_SMOOTHING, Math.round(weight * 100) / 100);
}

/**
 * The debiased EMA of `values`: s_n = w·s_{n−1} + (1−w)·v_n with s_0 = 0, shown as
 * s_n / (1 − w^n) over the n finite values seen so far. A missing or non-finite value is
 * kept as it is (a gap, or a NaN the chart marks) and does not move the average.
 */
export function smooth(values: readonly (number | null)[], weight: number): (number | null)[] {
  const w = clampSmoothing(weight);
  if (w === 0) return values.slice();
  let last = 0;
  let seen = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return value;
    last = last * w + (1 - w) * value;
    seen++;
    return last / (1 - w ** seen);
  });
}

/** The weight a page opens with: its URL's `smooth=` first, then this browser's last choice. */
export function initialSmoothing(query: URLSearchParams, storage: Pick<Storage, "getItem"> | null): number {
  const shared = query.get("smooth");
  if (shared !== null) return clampSmoothing(Number(shared));
  const stored = storage?.getItem(STORAGE_KEY) ?? null;
  return stored === null ? 0 : clampSmoothing(Number(stored));
}

/** Remember the weight for this browser's next page. */
export function rememberSmoothing(weight: number, storage: Pick<Storage, "setItem"> | null): void {
  storage?.setItem(STORAGE_KEY, String(clampSmoothing(weight)));
}

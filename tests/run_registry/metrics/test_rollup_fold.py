"""The numpy fold of a batch into every rollup level, against a brute force."""

import math
import random

import numpy as np

from mldiag_run_registry.metrics.chunks import fold_rollups
from mldiag_run_registry.metrics.repository import ROLLUP_LEVELS


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-12)


def test_fold_matches_brute_force_for_unordered_and_repeated_steps() -> None:
    rng = random.Random(3)
    # two series, unordered, with repeats, beyond the coarsest bucket
    sids = [rng.choice([7, 9]) for _ in range(6_000)]
    steps = [rng.randrange(0, 600_000) if i % 3 else rng.randrange(0, 500) for i in range(6_000)]
    values = [rng.choice([math.nan, math.inf, -math.inf, rng.random(), -0.0]) for _ in steps]
    values[:50] = [math.nan] * 50  # some buckets all NaN
    steps[:50] = [1_000_000 + i for i in range(50)]
    # times in no relation to the write order: a rewritten step's later write may be older,
    # and the time kept is still that of the point that gave last_value
    times = [rng.randrange(-(10**12), 10**15) for _ in steps]
    rollups = fold_rollups(
        np.array(sids, dtype=np.int64),
        np.array(steps, dtype=np.int64),
        np.array(times, dtype=np.int64),
        np.array(values, dtype=np.float64),
        ROLLUP_LEVELS,
    )
    expected: dict[tuple[int, int, int], list[int]] = {}
    for index, (sid, step) in enumerate(zip(sids, steps, strict=True)):
        for level in ROLLUP_LEVELS:
            expected.setdefault((sid, level, step >> level), []).append(index)
    keys = list(
        zip(
            rollups.series_ids.tolist(),
            rollups.levels.tolist(),
            rollups.buckets.tolist(),
            strict=True,
        )
    )
    assert keys == sorted(expected)  # every bucket once, in (series, level, bucket) order
    columns = rollups.merge_arguments()
    for row, key in enumerate(keys):
        indexes = expected[key]
        count, nans, lo, hi, total, first, last, last_value, last_time = (
            c[row] for c in columns[3:]
        )
        real = [values[i] for i in indexes if not math.isnan(values[i])]
        top = max(steps[i] for i in indexes)
        newest = max(i for i in indexes if steps[i] == top)  # the later write of a tie wins
        assert (count, nans) == (len(indexes), len(indexes) - len(real))
        assert (first, last) == (min(steps[i] for i in indexes), top)
        assert last_time == times[newest]  # the time of the very point giving last_value
        if not real:
            assert (lo, hi, total) == (None, None, None)
            continue
        assert _same(lo, min(real)) and _same(hi, max(real))  # type: ignore[arg-type]
        if math.inf in real and -math.inf in real:
            assert math.isnan(total)  # type: ignore[arg-type]
        else:
            assert _same(total, math.fsum(real))  # type: ignore[arg-type]
        assert _same(last_value, values[newest])  # type: ignore[arg-type]


def test_fold_of_nothing_is_empty() -> None:
    none = np.empty(0, dtype=np.int64)
    empty = fold_rollups(none, none, none, np.empty(0), ROLLUP_LEVELS)
    assert len(empty) == 0 and len(empty.last_times_us) == 0

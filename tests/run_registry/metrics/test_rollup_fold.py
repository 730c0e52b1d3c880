"""The in-memory fold of a batch into the finest rollup level, against a brute force."""

import math
import random

from mldiag_run_registry.metrics.repository import _fold


def test_fold_matches_brute_force_for_unordered_and_repeated_steps() -> None:
    rng = random.Random(3)
    steps = [rng.randrange(0, 500) for _ in range(3_000)]  # unordered, with repeats
    values = [rng.choice([math.nan, math.inf, -math.inf, rng.random()]) for _ in steps]
    buckets: dict[tuple[int, int], list[object]] = {}
    _fold(buckets, 7, steps, values, 6)
    expected: dict[int, list[int]] = {}
    for index, step in enumerate(steps):
        expected.setdefault(step >> 6, []).append(index)
    assert sorted(buckets) == [(7, b) for b in sorted(expected)]
    for bucket, indexes in expected.items():
        count, nans, lo, hi, total, first, last, last_value = buckets[(7, bucket)]
        real = [values[i] for i in indexes if not math.isnan(values[i])]
        top = max(steps[i] for i in indexes)
        newest = max(i for i in indexes if steps[i] == top)  # the later write of a tie wins
        assert (count, nans) == (len(indexes), len(indexes) - len(real))
        assert (lo, hi) == (min(real), max(real))
        assert (first, last) == (min(steps[i] for i in indexes), top)
        assert isinstance(total, float) and (math.isnan(total) or math.isinf(total))  # ±Inf mix
        want = values[newest]
        assert (math.isnan(want) and math.isnan(float(last_value))) or last_value == want  # type: ignore[arg-type]

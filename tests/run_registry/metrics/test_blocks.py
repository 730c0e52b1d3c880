"""Block helpers: keyset filtering and (step, series, time) order, against sorted()."""

import random

import numpy as np

from mldiag_run_registry.metrics import blocks
from mldiag_run_registry.metrics.blocks import PointBlock


def _block(points: list[tuple[int, int, int, float]]) -> PointBlock:
    return PointBlock(
        np.array([p[0] for p in points], dtype=np.int64),
        np.array([p[1] for p in points], dtype=np.int64),
        np.array([p[2] for p in points], dtype=np.int64),
        np.array([p[3] for p in points], dtype=np.float64),
    )


def _rows(block: PointBlock) -> list[tuple[int, int, int, float]]:
    return list(
        zip(
            block.steps.tolist(),
            block.series_ids.tolist(),
            block.times_us.tolist(),
            block.values.tolist(),
            strict=True,
        )
    )


def test_the_first_points_in_order_and_past_a_position_match_sorted() -> None:
    rng = random.Random(1)
    points = [
        (rng.randrange(20), rng.choice([3, 5]), rng.randrange(1_000_000), float(index))
        for index in range(500)
    ]
    block = blocks.concat([_block(points[:200]), _block(points[200:]), PointBlock.empty()])
    assert _rows(blocks.first_in_order(block, 50)) == sorted(points)[:50]
    ordered = blocks.first_in_order(block, 1_000)
    assert _rows(blocks.first_in_order(ordered, 7)) == sorted(points)[:7]  # no sort needed
    position = sorted(points)[123][:3]
    for series in (3, 5):
        mine = _block([p for p in points if p[1] == series])
        past = blocks.after_position(mine, *position, 15, series)
        assert sorted(_rows(past)) == [
            p for p in sorted(points) if p[1] == series and p[:3] > position and p[0] <= 15
        ]
    assert _rows(blocks.head(ordered, 2)) == sorted(points)[:2]
    assert blocks.same_key(_block([(1, 2, 3, 0.0), (1, 2, 3, 1.0)]), 0, 1)

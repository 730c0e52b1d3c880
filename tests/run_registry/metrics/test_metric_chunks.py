"""Chunk codecs: round trips bit for bit (NaN payloads, ±Inf, -0.0), both codecs, and
chunk boundaries."""

import numpy as np
import pytest

from mldiag_run_registry.metrics import chunks


def _columns(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = rng.integers(0, 2**63 - 1, count, dtype=np.int64)
    times = rng.integers(0, 253_402_300_799_999_999, count, dtype=np.int64)
    values = rng.standard_normal(count)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, np.finfo(np.float64).max]
    values[: min(count, len(special))] = special[:count]
    if count > len(special):  # a NaN with its own payload
        values.view(np.uint64)[len(special)] = 0x7FF8_0000_DEAD_BEEF
    return steps, times, values


@pytest.mark.parametrize("count", [0, 1, 2, 7, 8, 4096])
@pytest.mark.parametrize("codec", [chunks.CODEC_RAW, chunks.CODEC_PLANES])
def test_a_chunk_round_trips_bit_for_bit(count: int, codec: int) -> None:
    steps, times, values = _columns(count)
    encode = chunks.encode if codec == chunks.CODEC_PLANES else chunks.encode_raw
    points = chunks.decode(codec, encode(steps, times, values), count)
    assert points.steps.tolist() == steps.tolist()
    assert points.times_us.tolist() == times.tolist()
    assert points.values.view(np.uint64).tolist() == values.view(np.uint64).tolist()


def test_regular_series_compress_and_constant_values_compress_further() -> None:
    count = 4096
    steps = np.arange(1_000, 1_000 + count, dtype=np.int64)
    rng = np.random.default_rng(1)
    times = 1_760_000_000_000_000 + np.cumsum(10_000 + rng.integers(-500, 500, count))
    loss = 2.0 * np.exp(-steps / 3e5) + 0.05 * rng.standard_normal(count)
    noisy = chunks.encode(steps, times, loss)
    assert len(noisy) < 8.5 * count  # 24 bytes a point raw
    flat = chunks.encode(steps, times, np.full(count, 0.001))
    assert len(flat) < 2 * count  # the low value planes compress too: times are the rest
    assert chunks.decode(chunks.CODEC_PLANES, flat, count).values.tolist() == [0.001] * count


def test_corrupt_or_foreign_chunks_are_refused() -> None:
    steps, times, values = _columns(10)
    data = chunks.encode(steps, times, values)
    with pytest.raises(chunks.ChunkError):
        chunks.decode(chunks.CODEC_PLANES, data, 11)
    with pytest.raises(chunks.ChunkError):
        chunks.decode(7, data, 10)
    with pytest.raises(chunks.ChunkError):
        chunks.decode(chunks.CODEC_RAW, data, 10)


def test_chunks_start_per_series_every_size_points_and_on_the_grid_when_dense() -> None:
    series = np.array([1] * 5 + [2] * 2 + [5] * 4 + [6] * 3, dtype=np.int64)
    steps = np.array([3, 4, 5, 6, 7, 0, 9, 1, 100, 200, 300, 0, 1, 40], dtype=np.int64)
    # dense (at least size / 8 points per cell of 2 steps): series 1 (5 points over 3 cells)
    # and 2 (2 over 5) are cut on the grid; sparse: series 5 (4 over 151) and 6 (3 over 21)
    # on a grid of 128 steps and every 2 points
    got = chunks.chunk_starts(series, steps, 2, 2).tolist()
    assert got == [0, 1, 3, 5, 6, 7, 9, 10, 11, 13]
    empty = np.empty(0, dtype=np.int64)
    assert chunks.chunk_starts(empty, empty, 2, 2).tolist() == []


def test_a_dense_series_gets_chunks_aligned_to_the_step_grid() -> None:
    steps = np.arange(5_000, 20_000, dtype=np.int64)
    starts = chunks.chunk_starts(np.zeros(len(steps), dtype=np.int64), steps, 4096, 4096)
    assert steps[starts].tolist() == [5_000, 8_192, 12_288, 16_384]
    every = chunks.chunk_starts(np.zeros(len(steps), dtype=np.int64), steps, 3000, 1024)
    assert steps[every].tolist() == [5_000, *range(5_120, 20_000, 1_024)]


def test_a_sparse_series_spread_far_gets_chunks_of_bounded_span() -> None:
    steps = np.array([10, 70_000, 70_001, 900_000, 50_000_000], dtype=np.int64)
    starts = chunks.chunk_starts(np.zeros(5, dtype=np.int64), steps, 4096, 1024)
    assert steps[starts].tolist() == [10, 70_000, 900_000, 50_000_000]

"""Chunks of a series' points as bytes, and rollups folded from a batch's columns.

Pure functions over numpy columns (no I/O): the repository stores what ``encode`` gives in
``metric_chunks.data`` and reads it back with ``decode``; ``fold_rollups`` turns a batch into
the rollup rows merged into ``metric_rollups``. Nothing here makes one Python object per
point.

Codecs (``metric_chunks.codec``):

* ``CODEC_RAW`` (0): three big-endian arrays of ``n`` items back to back (steps int64, times
  µs int64, values float64), what plain SQL builds with ``int8send`` / ``float8send`` and
  ``string_agg`` (the migration from row-per-point storage writes these).
* ``CODEC_PLANES`` (1): steps and times as their first value and the differences between
  neighbours, each difference column at the narrowest signed width holding it (1, 2, 4 or 8
  bytes), split into byte planes (byte k of every item together); the planes that compress
  well deflated (zlib level 1). Layout: a 27-byte header ``<BIIBBqq`` (flags, n, length of
  the deflated part, step and time widths, first step, first time), the deflated part
  (step planes, time planes, value planes 6 and 7), then value planes 0 to 5 raw. Step
  differences of a training run are 1 (one plane that deflates to nothing), time differences
  fit 2 bytes; of a float64 only the sign, exponent and top mantissa bytes (planes 6, 7)
  repeat, the six low planes of a noisy value are random and deflating them costs time for
  nothing, so they stay raw unless a sample of them compresses (integer-valued or constant
  series). Values are kept bit for bit: NaN payloads, ±Inf and -0.0 survive. Measured on a
  noisy decaying loss (steps consecutive, times 10 ms ± 0.5 ms apart): 8.5 bytes a point
  with chunks of 1024 points, ~27 ns a point to decode (docs/metrics.md).
"""

import itertools
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mldiag_run_registry.metrics.blocks import Float64s, Int64s

CODEC_RAW = 0
CODEC_PLANES = 1

CHUNK_POINTS = 4096
"""Points per chunk at most (a batch's points of one series give one or more chunks)."""

CHUNK_GRID = 1024
"""A dense series' chunks are also cut at every multiple of this many steps: then the last
step of any rollup bucket of 1024 steps or more (level 10 up: every chart of a series over
1M steps) is a chunk's last step, whose time the chunk row keeps."""

_HEADER = struct.Struct("<BIIBBqq")  # flags, n, deflated length, widths, first step, first time
_LOW_PLANES_DEFLATED = 1
_RAW_VALUE_PLANES = 6  # planes 0..5 of a little-endian float64: the low mantissa bytes
_SAMPLE_BYTES = 512
_WIDTHS = ((1, np.int8), (2, np.int16), (4, np.int32))


class ChunkError(ValueError):
    """Bytes that are not a chunk of the codec they claim (a corrupt or foreign row)."""


def _narrow(deltas: npt.NDArray[np.int64]) -> tuple[int, npt.NDArray[np.uint8]]:
    """The narrowest signed width holding every delta, and their byte planes at it."""
    if len(deltas) == 0:
        return 1, np.empty((1, 0), dtype=np.uint8)
    low, high = int(deltas.min()), int(deltas.max())
    for width, kind in _WIDTHS:
        info = np.iinfo(kind)
        if info.min <= low and high <= info.max:
            return width, _planes(deltas.astype(np.dtype(kind).newbyteorder("<")), width)
    return 8, _planes(deltas, 8)


def _planes(
    column: npt.NDArray[np.signedinteger[Any]] | npt.NDArray[np.float64], width: int = 8
) -> npt.NDArray[np.uint8]:
    """(width, n) bytes: row k holds byte k (little-endian) of every item."""
    little = np.ascontiguousarray(column, dtype=column.dtype.newbyteorder("<"))
    return np.ascontiguousarray(little.view(np.uint8).reshape(-1, width).T)


def _widen(planes: npt.NDArray[np.uint8], width: int, first: int) -> Int64s:
    """Deltas stored at ``width`` bytes back into the int64 column they came from."""
    if width == 1:
        deltas = planes.reshape(-1).view(np.int8)
    else:
        deltas = np.ascontiguousarray(planes.T).view(f"<i{width}").reshape(-1)
    column = np.empty(len(deltas) + 1, dtype=np.int64)
    column[0] = first
    # wrapping sums are exact: the differences wrapped the same way
    np.cumsum(deltas, dtype=np.int64, out=column[1:])
    column[1:] += first
    return column


def encode(steps: Int64s, times_us: Int64s, values: Float64s) -> bytes:
    """One chunk's points (any order; it is kept) as ``CODEC_PLANES`` bytes."""
    count = len(steps)
    if count == 0:
        return _HEADER.pack(0, 0, 0, 1, 1, 0, 0)
    with np.errstate(over="ignore"):
        step_width, step_planes = _narrow(np.diff(steps))
        time_width, time_planes = _narrow(np.diff(times_us))
    value_planes = _planes(np.ascontiguousarray(values).view(np.int64))
    low = value_planes[:_RAW_VALUE_PLANES].tobytes()
    flags = 0
    head = [step_planes.tobytes(), time_planes.tobytes()]
    head.append(value_planes[_RAW_VALUE_PLANES:].tobytes())
    sample = low[:_SAMPLE_BYTES]
    if len(zlib.compress(sample, 1)) < len(sample) * 3 // 4:
        flags |= _LOW_PLANES_DEFLATED
        head.append(low)
        low = b""
    deflated = zlib.compress(b"".join(head), 1)
    header = _HEADER.pack(
        flags, count, len(deflated), step_width, time_width, int(steps[0]), int(times_us[0])
    )
    return b"".join((header, deflated, low))


def encode_raw(steps: Int64s, times_us: Int64s, values: Float64s) -> bytes:
    """One chunk's points as ``CODEC_RAW`` bytes (what the SQL migration writes)."""
    return b"".join(
        (
            steps.astype(">i8").tobytes(),
            times_us.astype(">i8").tobytes(),
            values.astype(">f8").tobytes(),
        )
    )


@dataclass(frozen=True, slots=True)
class Points:
    """One chunk's columns, decoded."""

    steps: Int64s
    times_us: Int64s
    values: Float64s


def decode(codec: int, data: bytes, count: int) -> Points:
    """The ``count`` points of a stored chunk, in the order they were encoded."""
    if codec == CODEC_RAW:
        if len(data) != 24 * count:
            raise ChunkError(f"a raw chunk of {count} points has {len(data)} bytes")
        raw = np.frombuffer(data, dtype=">i8", count=2 * count)
        return Points(
            raw[:count].astype(np.int64),
            raw[count:].astype(np.int64),
            np.frombuffer(data, dtype=">f8", offset=16 * count).astype(np.float64),
        )
    if codec != CODEC_PLANES:
        raise ChunkError(f"unknown chunk codec {codec}")
    if len(data) < _HEADER.size:
        raise ChunkError("a chunk shorter than its header")
    flags, stored, length, step_width, time_width, first_step, first_time = _HEADER.unpack_from(
        data
    )
    if stored != count:
        raise ChunkError(f"a chunk of {count} points says {stored}")
    if count == 0:
        return Points(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64))
    try:
        head = zlib.decompress(memoryview(data)[_HEADER.size : _HEADER.size + length])
    except zlib.error as error:
        raise ChunkError(f"a chunk that does not inflate: {error}") from error
    planes = np.frombuffer(head, dtype=np.uint8)
    deltas = count - 1
    steps_end = step_width * deltas
    times_end = steps_end + time_width * deltas
    top_end = times_end + 2 * count
    if flags & _LOW_PLANES_DEFLATED:
        low = planes[top_end:]
    else:
        low = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size + length)
    if len(low) != _RAW_VALUE_PLANES * count or len(planes) < top_end:
        raise ChunkError("chunk planes do not match its point count")
    steps = _widen(planes[:steps_end].reshape(step_width, deltas), step_width, first_step)
    times = _widen(planes[steps_end:times_end].reshape(time_width, deltas), time_width, first_time)
    value_planes = np.concatenate(
        (low.reshape(_RAW_VALUE_PLANES, count), planes[times_end:top_end].reshape(2, count))
    )
    values = np.ascontiguousarray(value_planes.T).view("<f8").reshape(-1)
    return Points(steps, times, values.astype(np.float64, copy=False))


def chunk_starts(
    series_ids: Int64s, steps: Int64s, size: int = CHUNK_POINTS, grid: int = CHUNK_GRID
) -> Int64s:
    """Where chunks begin in points sorted by (series, step): a new one per series, every
    ``size`` points, and, in a dense series, at every multiple of ``grid`` steps.

    Aligned to the step grid, a dense series' chunks end where rollup buckets of ``grid``
    steps and more end, so the point at a bucket's last step is a chunk's last point (its
    time is kept beside the chunk: charts with times need no decoding). A sparse series
    (fewer than ``grid / 8`` points per grid cell in the batch) is cut on a grid 64 times
    wider, or its chunks would hold a handful of points each; that wider grid still bounds
    every chunk's step span (a late write of a few points spread over a long series would
    otherwise make one chunk span it all, and every read search that span).
    """
    total = len(series_ids)
    if total == 0:
        return np.empty(0, dtype=np.int64)
    series_starts = np.flatnonzero(np.diff(series_ids)) + 1
    bounds = np.concatenate(([0], series_starts, [total])).tolist()
    starts: list[Int64s] = []
    for low, high in itertools.pairwise(bounds):
        cells = steps[low:high] // grid
        if (high - low) * 8 < (int(cells[-1]) - int(cells[0]) + 1) * grid:
            cells = steps[low:high] // (grid * 64)
        segments = [low, *(np.flatnonzero(np.diff(cells)) + 1 + low).tolist(), high]
        starts.extend(np.arange(a, b, size) for a, b in itertools.pairwise(segments))
    return np.concatenate(starts).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Rollups:
    """Rollup rows as aligned columns, in (series, level, bucket) order (replicas lock
    rows alike). ``lo``, ``hi``, ``total`` cover non-NaN values; where ``count ==
    nan_count`` they hold placeholders and are stored as NULL."""

    series_ids: Int64s
    levels: Int64s
    buckets: Int64s
    counts: Int64s
    nan_counts: Int64s
    lo: Float64s
    hi: Float64s
    total: Float64s
    first_steps: Int64s
    last_steps: Int64s
    last_values: Float64s
    last_times_us: Int64s
    """The time of the point that gave ``last_value`` (at ``last_step``, written last)."""

    def __len__(self) -> int:
        return len(self.series_ids)

    def merge_arguments(self) -> list[list[object]]:
        """The twelve columns as lists for the merge's ``unnest`` (None for SQL NULL)."""
        all_nan = np.flatnonzero(self.counts == self.nan_counts)
        columns: list[list[object]] = [
            self.series_ids.tolist(),
            self.levels.tolist(),
            self.buckets.tolist(),
            self.counts.tolist(),
            self.nan_counts.tolist(),
            self.lo.tolist(),
            self.hi.tolist(),
            self.total.tolist(),
            self.first_steps.tolist(),
            self.last_steps.tolist(),
            self.last_values.tolist(),
            self.last_times_us.tolist(),
        ]
        for index in all_nan.tolist():
            columns[5][index] = columns[6][index] = columns[7][index] = None
        return columns


def write_order(series_ids: Int64s, steps: Int64s) -> Int64s | None:
    """The stable permutation sorting points by (series, step), None when already sorted
    (the common case: a batch's points of one series come in step order)."""
    if len(steps) < 2:
        return None
    series_step = np.diff(series_ids)
    if np.all((series_step > 0) | ((series_step == 0) & (np.diff(steps) > 0))):
        return None
    return np.lexsort((steps, series_ids)).astype(np.int64)


def fold_rollups(
    series_ids: Int64s,
    steps: Int64s,
    times_us: Int64s,
    values: Float64s,
    levels: tuple[int, ...],
) -> Rollups:
    """Aggregates of a batch's points per (series, level, bucket of 2**level steps).

    The points may come in any order; of points at one step of a series the one written last
    (latest in the arrays) gives ``last_value``, as the stored merge's tie rule does, and its
    time gives ``last_times_us``: value and time always describe one point. The finest level
    is reduced from the sorted points, each coarser one from the level below.
    """
    if len(steps) == 0:
        none, nothing = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        return Rollups(
            none, none, none, none, none, nothing, nothing, nothing, none, none, nothing, none
        )
    order = write_order(series_ids, steps)
    if order is not None:  # lexsort is stable: among equal steps the later write stays later
        series_ids, steps = series_ids[order], steps[order]
        times_us, values = times_us[order], values[order]
    nan = np.isnan(values)
    parts: list[tuple[Int64s, ...]] = []
    floats: list[tuple[Float64s, ...]] = []
    # the finest level, straight from the points
    buckets = steps >> levels[0]
    starts = _group_starts(series_ids, buckets)
    ends = np.append(starts[1:], len(steps)) - 1
    level_sids = series_ids[starts]
    level_buckets = buckets[starts]
    counts = np.diff(np.append(starts, len(steps)))
    nan_counts = np.add.reduceat(nan.astype(np.int64), starts)
    lo = np.minimum.reduceat(np.where(nan, np.inf, values), starts)
    hi = np.maximum.reduceat(np.where(nan, -np.inf, values), starts)
    with np.errstate(invalid="ignore"):  # +Inf and -Inf in one bucket: NaN, as SQL's sum
        total = np.add.reduceat(np.where(nan, 0.0, values), starts)
    first_steps, last_steps, last_values = steps[starts], steps[ends], values[ends]
    last_times = times_us[ends]
    for number, level in enumerate(levels):
        if number:
            shift = level - levels[number - 1]
            coarse = level_buckets >> shift
            starts = _group_starts(level_sids, coarse)
            ends = np.append(starts[1:], len(coarse)) - 1
            level_sids, level_buckets = level_sids[starts], coarse[starts]
            counts = np.add.reduceat(counts, starts)
            nan_counts = np.add.reduceat(nan_counts, starts)
            lo = np.minimum.reduceat(lo, starts)
            hi = np.maximum.reduceat(hi, starts)
            with np.errstate(invalid="ignore"):
                total = np.add.reduceat(total, starts)
            # buckets ascend inside a group, so the last holds the group's highest step
            first_steps, last_steps = first_steps[starts], last_steps[ends]
            last_values, last_times = last_values[ends], last_times[ends]
        parts.append(
            (
                level_sids,
                np.full(len(level_sids), level, dtype=np.int64),
                level_buckets,
                counts,
                nan_counts,
                first_steps,
                last_steps,
                last_times,
            )
        )
        floats.append((lo, hi, total, last_values))
    ints = [np.concatenate([part[k] for part in parts]) for k in range(8)]
    reals = [np.concatenate([part[k] for part in floats]) for k in range(4)]
    order = np.lexsort((ints[2], ints[1], ints[0]))
    ints = [column[order] for column in ints]
    reals = [column[order] for column in reals]
    return Rollups(
        series_ids=ints[0],
        levels=ints[1],
        buckets=ints[2],
        counts=ints[3],
        nan_counts=ints[4],
        lo=reals[0],
        hi=reals[1],
        total=reals[2],
        first_steps=ints[5],
        last_steps=ints[6],
        last_values=reals[3],
        last_times_us=ints[7],
    )


def _group_starts(series_ids: Int64s, keys: Int64s) -> Int64s:
    """Indexes where (series, key) changes in sorted columns (0 first)."""
    if len(keys) == 0:
        return np.empty(0, dtype=np.int64)
    change = (np.diff(series_ids) != 0) | (np.diff(keys) != 0)
    return np.concatenate(([0], np.flatnonzero(change) + 1)).astype(np.int64)

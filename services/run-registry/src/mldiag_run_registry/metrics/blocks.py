"""Points as columns: what the store reads back and what reads and exports stream out.

A block holds points in (step, series id, time) order as four aligned numpy arrays, so a page
of 10,000 points or an export of 100M never becomes one Python object per point.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Int64s = npt.NDArray[np.int64]
Float64s = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class PointBlock:
    """Aligned columns of points, in (step, series id, time) order."""

    steps: Int64s
    series_ids: Int64s
    times_us: Int64s
    values: Float64s
    """NaN and ±Inf are kept as they were written."""

    def __len__(self) -> int:
        return len(self.steps)

    @classmethod
    def empty(cls) -> "PointBlock":
        """A block of no points."""
        none = np.empty(0, dtype=np.int64)
        return cls(none, none, none, np.empty(0, dtype=np.float64))


def after_position(
    block: PointBlock,
    step: int,
    series_id: int,
    micros: int,
    high_step: int,
    own_id: int,
) -> PointBlock:
    """The points of one series' block past the keyset position (step, series id, time)
    and at most ``high_step``."""
    steps = block.steps
    if own_id > series_id:
        keep = steps >= step
    elif own_id < series_id:
        keep = steps > step
    else:
        keep = (steps > step) | ((steps == step) & (block.times_us > micros))
    keep &= steps <= high_step
    if keep.all():
        return block
    return PointBlock(steps[keep], block.series_ids[keep], block.times_us[keep], block.values[keep])


def same_key(block: PointBlock, one: int, other: int) -> bool:
    """Whether two points of a block are equal in (step, series id, time)."""
    return bool(
        block.steps[one] == block.steps[other]
        and block.series_ids[one] == block.series_ids[other]
        and block.times_us[one] == block.times_us[other]
    )


def head(block: PointBlock, count: int) -> PointBlock:
    """The block's first ``count`` points."""
    return PointBlock(
        block.steps[:count], block.series_ids[:count], block.times_us[:count], block.values[:count]
    )


def unordered_ties(steps: Int64s, times: Int64s) -> bool:
    """Whether points at one step are out of time order (sorted steps assumed)."""
    tie = np.diff(steps) == 0
    return bool(np.any(tie & (np.diff(times) < 0)))


def concat(blocks: Sequence[PointBlock]) -> PointBlock:
    """Blocks one after the other (no sort)."""
    blocks = [block for block in blocks if len(block)]
    if not blocks:
        return PointBlock.empty()
    if len(blocks) == 1:
        return blocks[0]
    return PointBlock(
        np.concatenate([b.steps for b in blocks]),
        np.concatenate([b.series_ids for b in blocks]),
        np.concatenate([b.times_us for b in blocks]),
        np.concatenate([b.values for b in blocks]),
    )


def first_in_order(block: PointBlock, limit: int) -> PointBlock:
    """The block's first ``limit`` points in (step, series id, time) order."""
    steps, sids, times = block.steps, block.series_ids, block.times_us
    if len(steps) > 1:
        # chunks of one series that do not overlap come in order already: no sort then
        same = np.diff(steps) == 0
        ordered = np.all(
            (np.diff(steps) > 0)
            | (same & (np.diff(sids) > 0))
            | (same & (np.diff(sids) == 0) & (np.diff(times) >= 0))
        )
        if not ordered:
            order = np.lexsort((times, sids, steps))[:limit]
            return PointBlock(steps[order], sids[order], times[order], block.values[order])
    if len(steps) <= limit:
        return block
    return PointBlock(steps[:limit], sids[:limit], times[:limit], block.values[:limit])

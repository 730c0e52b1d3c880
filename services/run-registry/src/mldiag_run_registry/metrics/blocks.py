"""Points as columns: what the store reads back and what reads and exports stream out.

A block holds points in (step, series id, time) order as four aligned numpy arrays, so a page
of 10,000 points or an export of 100M never becomes one Python object per point.
"""

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

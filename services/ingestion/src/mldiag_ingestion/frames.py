"""Reading a metrics write sent as a binary columnar frame (``application/x-mldiag-columns``).

The header is checked by the same contract as a JSON write (each series' name, host,
process index and labels; a bad series is left out and listed, a malformed request refused
whole with the same codes); the columns are never turned into Python objects: they stay
numpy views over the request's bytes, checked point by point in numpy by the service.
"""

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from mldiag_ingestion.errors import InvalidBatch, refused_write
from mldiag_schemas.columnar import FrameError, read_layout
from mldiag_schemas.telemetry import MetricSeries, RejectedPoints, WriteMetricsRequest

Int64s = npt.NDArray[np.int64]
Float64s = npt.NDArray[np.float64]

_FRAME_ONLY = ("count", "times")
"""Header fields of a series that describe the frame, not the series."""

_INT64 = np.dtype("<i8")
_FLOAT64 = np.dtype("<f8")


@dataclass(frozen=True, slots=True)
class SeriesColumns:
    """One series' columns: read-only numpy views over the request's bytes."""

    steps: Int64s
    values: Float64s
    times: Int64s | None
    """µs since the epoch; None when the series has no times (stamped on receipt)."""


@dataclass(frozen=True, slots=True)
class FrameWrite:
    """A metrics write read from a frame: the series kept, their columns, what was refused."""

    batch_id: uuid.UUID | None
    series: list[MetricSeries]
    """The series kept (their columns empty here: see :attr:`columns`)."""
    indexes: list[int]
    """Each kept series' index in the request as sent."""
    columns: list[SeriesColumns]
    """Each kept series' points, in the order of :attr:`series`."""
    refused: list[RejectedPoints]
    """Series refused whole, with their point counts."""
    total_points: int
    """Points in the request, refused series included (the per-request limit counts them)."""


def parse_frame_write(raw: bytes) -> FrameWrite:
    """Read and check a frame write; raise the JSON path's errors for a malformed request
    (``invalid_batch`` for a broken frame, ``invalid_metric_name``/``invalid_labels`` when
    the first broken rule is theirs)."""
    try:
        layout = read_layout(raw)
    except FrameError as exc:
        raise InvalidBatch(
            f"the write request is not a valid frame: {exc}",
            details=[{"field": "body", "problem": str(exc)}],
        ) from None
    header = layout.header
    shells: list[dict[str, Any]] = []
    for meta in header["series"]:
        shell = {key: value for key, value in meta.items() if key not in _FRAME_ONLY}
        shell["steps"], shell["values"] = [], []
        shells.append(shell)
    try:
        request = WriteMetricsRequest.parse_keeping_good_series({**header, "series": shells})
    except ValidationError as exc:
        raise refused_write(exc) from None
    counts = [place.count for place in layout.series]
    refused = [
        rejection.model_copy(update={"rejected_points": counts[rejection.series_index]})
        for rejection in request.refused_series
    ]
    indexes = request.series_indexes()
    view = memoryview(raw)
    columns = []
    for index in indexes:
        place = layout.series[index]
        columns.append(
            SeriesColumns(
                np.frombuffer(view, _INT64, place.count, place.steps_at),
                np.frombuffer(view, _FLOAT64, place.count, place.values_at),
                None
                if place.times_at is None
                else np.frombuffer(view, _INT64, place.count, place.times_at),
            )
        )
    return FrameWrite(
        batch_id=request.batch_id,
        series=list(request.series),
        indexes=indexes,
        columns=columns,
        refused=refused,
        total_points=sum(counts),
    )

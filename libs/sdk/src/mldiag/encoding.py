"""Turning buffered calls into the columnar ``WriteMetricsRequest`` body (sender thread only).

Values are converted here, off the training thread: ``float()`` of a JAX or torch array
waits for the device, which is exactly what ``log`` must never do. Lists and arrays with
more than one element are averaged, as the official SDK does.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

logger = logging.getLogger("mldiag")

# Kept equal to mldiag_schemas.telemetry.METRIC_NAME_PATTERN: the SDK depends on httpx only,
# and a name the server would reject must be dropped here, not fail the whole batch.
_METRIC_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./:-]{0,199}$")


Entry = tuple[int, float, Mapping[str, Any], Mapping[str, str] | None]
"""One buffered call: its step, wall time (epoch seconds), values and labels.

A plain tuple: building a named tuple costs the training thread four times as much.
"""

_YIELD_EVERY = 64
"""Entries converted between two releases of the GIL (see :func:`_yield_gil`)."""


class Batch(NamedTuple):
    """An encoded request body (gzipped JSON) and what it holds."""

    batch_id: uuid.UUID
    body: bytes
    points: int


class Encoder:
    """Builds request bodies; remembers names it warned about so it warns once each."""

    def __init__(self, host: str, process_index: int | None = None) -> None:
        self._host = host
        self._process_index = process_index
        self._bad_names: set[str] = set()

    def encode(self, entries: Iterable[Entry]) -> Batch | None:
        """The request body for ``entries``, or None when no point survives conversion."""
        columns: dict[tuple[str, tuple[tuple[str, str], ...]], _Columns] = {}
        points = 0
        for index, (step, when, values, entry_labels) in enumerate(entries):
            if index % _YIELD_EVERY == _YIELD_EVERY - 1:
                _yield_gil()
            labels = tuple(sorted(entry_labels.items())) if entry_labels else ()
            stamp = _rfc3339(when)
            for name, raw in values.items():
                value = self._convert(name, raw)
                if value is None:
                    continue
                key = (name, labels)
                series = columns.get(key)
                if series is None:
                    series = columns[key] = _Columns()
                series.steps.append(step)
                series.values.append(value)
                series.times.append(stamp)
                points += 1
        if not points:
            return None
        batch_id = uuid.uuid4()
        # One json.dumps per series, not per body: a single C call holds the GIL throughout,
        # and the training thread must not wait that long for it.
        parts: list[str] = []
        for (name, labels), series in columns.items():
            _yield_gil()
            parts.append(_dumps(_series(name, labels, series, self._host, self._process_index)))
        raw_json = f'{{"batchId":"{batch_id}","series":[{",".join(parts)}]}}'.encode()
        return Batch(batch_id, gzip.compress(raw_json, compresslevel=5), points)

    def _convert(self, name: str, raw: Any) -> float | None:
        if name not in self._bad_names and not (
            isinstance(name, str) and _METRIC_NAME_RE.match(name)
        ):
            self._bad_names.add(name)
            logger.warning("mldiag.metric.bad_name name=%r (dropped)", name)
        if name in self._bad_names:
            return None
        try:
            return to_float(raw)
        except (TypeError, ValueError, OverflowError) as error:
            logger.warning("mldiag.metric.bad_value name=%s error=%s (point dropped)", name, error)
            return None


class _Columns:
    __slots__ = ("steps", "times", "values")

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.values: list[float] = []
        self.times: list[str] = []


def _series(
    name: str,
    labels: tuple[tuple[str, str], ...],
    columns: _Columns,
    host: str,
    process_index: int | None,
) -> dict[str, Any]:
    series: dict[str, Any] = {
        "name": name,
        "steps": columns.steps,
        "values": columns.values,
        "times": columns.times,
        "host": host,
    }
    if process_index is not None:
        series["processIndex"] = process_index
    if labels:
        series["labels"] = dict(labels)
    return series


def to_float(value: Any) -> float:  # noqa: PLR0911  # one early return per kind of value
    """A Python float from a number, a numpy/JAX/torch scalar or array (averaged), a list."""
    if isinstance(value, float):
        return value
    if isinstance(value, int):  # bool included
        return float(value)
    size = getattr(value, "size", None)
    if isinstance(size, int) and size != 1 and hasattr(value, "mean"):
        if size == 0:
            return math.nan
        return float(value.mean())
    if isinstance(value, list | tuple):
        if not value:
            return math.nan
        return math.fsum(to_float(item) for item in value) / len(value)
    return float(value)


def _dumps(value: Any) -> str:
    # allow_nan: NaN and ±Inf travel as JSON tokens, which the server keeps.
    return json.dumps(value, separators=(",", ":"), allow_nan=True)


def _yield_gil() -> None:
    """Let a waiting thread (training) take the GIL now rather than after the 5 ms switch."""
    time.sleep(0)


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()

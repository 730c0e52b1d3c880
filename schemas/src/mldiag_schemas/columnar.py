"""The binary columnar frame metric points travel in (HTTP writes and the bus).

JSON spends most of a point's cost on text and Python objects; a frame carries the columns
as packed little-endian arrays that readers take in one copy. Layout (docs/wire-format.md)::

    b"MLDC" · version (u8, 1) · header length (u32 LE) · header (UTF-8 JSON object)
    · per series, in header order: steps int64[n] · values float64[n] · times µs int64[n]

The header's ``series`` list names each series (``count``: its n; ``times``: whether the
times column is there) besides its own fields; every other header field belongs to the
carrier (a write request's ``batchId``, a bus message's envelope). A JSON body never starts
with ``MLDC``, so a reader tells the two apart by the first four bytes.

Stdlib only (``schemas`` depends on pydantic alone): columns decode to ``array.array``.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONTENT_TYPE = "application/x-mldiag-columns"
"""The media type of a frame (HTTP ``Content-Type`` and the bus's ``Content-Type`` header)."""

JSON_CONTENT_TYPE = "application/json"
"""The media type of everything else."""

MAGIC = b"MLDC"
"""The first four bytes of every frame."""

VERSION = 1
"""The frame layout's version (the byte after the magic)."""

_PREFIX = struct.Struct("<4sBI")
PREFIX_SIZE = _PREFIX.size
"""Bytes before the header: magic, version, header length."""

_ITEM = 8
"""Bytes per element of every column (int64, float64)."""

_SWAP = sys.byteorder != "little"
"""Whether this machine must swap bytes to and from the frame's little-endian columns."""

_INT_FORMATS = frozenset({"q", "<q", "=q", "l", "<l", "=l"})
_FLOAT_FORMATS = frozenset({"d", "<d", "=d"})


class FrameError(ValueError):
    """The bytes are not a valid frame (truncated, a wrong length, a bad header)."""

    code = "invalid_frame"


@dataclass(frozen=True, slots=True)
class SeriesLayout:
    """Where one series' columns lie in a frame."""

    count: int
    """Points in the series."""
    steps_at: int
    """Offset of the steps column (int64[count])."""
    values_at: int
    """Offset of the values column (float64[count])."""
    times_at: int | None
    """Offset of the times column (int64[count], µs since the epoch), None when absent."""


@dataclass(frozen=True, slots=True)
class FrameLayout:
    """A frame's header and where each series' columns lie; the columns stay unread."""

    header: dict[str, Any]
    """The header, with ``series`` entries still carrying ``count`` and ``times``."""
    series: tuple[SeriesLayout, ...]
    """Each series of ``header["series"]``, in order."""


@dataclass(frozen=True, slots=True)
class Columns:
    """One series' columns, decoded."""

    steps: array[int]
    values: array[float]
    times: array[int] | None


def is_frame(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` starts like a frame (JSON never does)."""
    return bytes(data[:4]) == MAGIC


def _column(column: Sequence[Any], floats: bool) -> Any:
    """``column`` as a buffer of 8-byte little-endian items, copying only when it must."""
    typecode = "d" if floats else "q"
    if isinstance(column, array) and column.typecode == typecode and not _SWAP:
        return column
    if not _SWAP and not isinstance(column, list | tuple | array):
        try:  # numpy arrays and other buffers of the right item type go as they are
            view = memoryview(column)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            formats = _FLOAT_FORMATS if floats else _INT_FORMATS
            if view.itemsize == _ITEM and view.c_contiguous and view.format in formats:
                return view
    try:
        packed = array(typecode, column)
    except (TypeError, OverflowError) as exc:
        kind = "float64" if floats else "int64"
        raise FrameError(f"a column does not fit {kind}: {exc}") from exc
    if _SWAP:
        packed.byteswap()
    return packed


def encode_frame(
    header: Mapping[str, Any],
    columns: Sequence[tuple[Sequence[int], Sequence[float], Sequence[int] | None]],
) -> bytes:
    """A frame of ``header`` and one ``(steps, values, times or None)`` per entry of
    ``header["series"]`` (``count`` and ``times`` are filled in here).

    Lists, ``array.array`` and numpy arrays are accepted; arrays of the right type are
    copied once, into the frame. Raises :class:`FrameError` when the columns of a series
    differ in length or a value does not fit its column.
    """
    metas = header.get("series", [])
    if len(metas) != len(columns):
        raise FrameError(f"{len(metas)} series in the header but {len(columns)} column sets")
    series: list[dict[str, Any]] = []
    parts: list[Any] = [b"", b""]
    for meta, (steps, values, times) in zip(metas, columns, strict=True):
        count = len(steps)
        if len(values) != count or (times is not None and len(times) != count):
            raise FrameError(f"series {meta.get('name')!r}: its columns differ in length")
        series.append({**meta, "count": count, "times": times is not None})
        parts.append(_column(steps, floats=False))
        parts.append(_column(values, floats=True))
        if times is not None:
            parts.append(_column(times, floats=False))
    text = json.dumps({**header, "series": series}, separators=(",", ":"), allow_nan=False).encode()
    parts[0] = _PREFIX.pack(MAGIC, VERSION, len(text))
    parts[1] = text
    return b"".join(parts)


def read_layout(data: bytes | bytearray | memoryview) -> FrameLayout:
    """Check a frame's framing and header, and locate its columns without reading them.

    Raises :class:`FrameError` for a wrong magic or version, a truncated frame, a header
    that is not a JSON object with a ``series`` list of objects with a ``count`` (an
    integer >= 0) and ``times`` (a boolean), or a body whose length is not exactly what
    the header announces.
    """
    size = len(data)
    if size < PREFIX_SIZE:
        raise FrameError(f"a frame is at least {PREFIX_SIZE} bytes; got {size}")
    magic, version, header_size = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise FrameError("not a frame: it does not start with MLDC")
    if version != VERSION:
        raise FrameError(f"frame version {version} is not supported (only {VERSION})")
    start = PREFIX_SIZE + header_size
    if start > size:
        raise FrameError(f"truncated frame: the header needs {header_size} bytes")
    try:
        header = json.loads(bytes(data[PREFIX_SIZE:start]))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise FrameError(f"the frame's header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise FrameError("the frame's header must be a JSON object")
    metas = header.get("series")
    if not isinstance(metas, list):
        raise FrameError("the frame's header has no `series` list")
    layout: list[SeriesLayout] = []
    offset = start
    for index, meta in enumerate(metas):
        if not isinstance(meta, dict):
            raise FrameError(f"series {index} of the header is not an object")
        count, times = meta.get("count"), meta.get("times", False)
        if type(count) is not int or count < 0 or type(times) is not bool:
            raise FrameError(
                f"series {index}: `count` must be an integer >= 0 and `times` a boolean"
            )
        width = count * _ITEM
        steps_at, values_at = offset, offset + width
        offset = values_at + width
        times_at = None
        if times:
            times_at, offset = offset, offset + width
        layout.append(SeriesLayout(count, steps_at, values_at, times_at))
    if offset != size:
        what = "truncated" if offset > size else "trailing bytes after the columns in a"
        raise FrameError(f"{what} frame: the header announces {offset} bytes, got {size}")
    return FrameLayout(header, tuple(layout))


def read_column(data: bytes | bytearray | memoryview, at: int, count: int, typecode: str) -> Any:
    """The ``count`` items at offset ``at`` as an ``array.array`` of ``typecode`` (one copy)."""
    column = array(typecode)
    column.frombytes(memoryview(data)[at : at + count * _ITEM])
    if _SWAP:
        column.byteswap()
    return column


_TOP = 0 if _SWAP else _ITEM - 1
"""Offset of an int64's most significant byte in memory."""
_AT_LEAST: dict[int, re.Pattern[bytes]] = {}


def int64s_within(column: array[int], high: int) -> bool:
    """Whether every item of an int64 ``column`` lies within ``0 .. high`` (``high`` >= 0),
    at C speed: the items' most significant bytes, copied out as one ``bytes``, are searched
    for one at or above ``high``'s (a negative item's is 0x80 or more); only when one is
    found are the items compared (``min``/``max``, a Python object per item)."""
    if not column:
        return True
    limit = min(high >> 56, 0x7F)
    pattern = _AT_LEAST.get(limit)
    if pattern is None:
        pattern = _AT_LEAST[limit] = re.compile(b"[" + re.escape(bytes([limit])) + b"-\xff]")
    tops = column.tobytes()[_TOP::_ITEM]  # a copy and a strided slice, both at C speed
    if pattern.search(tops) is None:
        return True
    return min(column) >= 0 and max(column) <= high


def decode_frame(data: bytes | bytearray | memoryview) -> tuple[dict[str, Any], list[Columns]]:
    """A frame's header (series entries keep ``count`` and ``times``) and its columns as
    ``array.array`` (``'q'`` steps and times, ``'d'`` values); see :func:`read_layout`."""
    layout = read_layout(data)
    columns = [
        Columns(
            read_column(data, series.steps_at, series.count, "q"),
            read_column(data, series.values_at, series.count, "d"),
            None
            if series.times_at is None
            else read_column(data, series.times_at, series.count, "q"),
        )
        for series in layout.series
    ]
    return layout.header, columns

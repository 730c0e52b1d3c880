"""Metric points written as bytes straight from PointBlocks: a page's JSON, CSV and JSON Lines.

A page of 10,000 points or an export of 100M never becomes one Python object per point. Each
column becomes a matrix of bytes (one row per point, NUL-padded to the column's widest
item) with a handful of numpy operations; the columns are laid side by side with the constant
pieces of the line, and dropping every NUL gives the text. PostgreSQL's text columns cannot
hold NUL, so a host or label never contains one and the padding is all that is dropped.

- integers (steps): digits from a table of 3-digit groups, leading zeros dropped;
- times: RFC 3339 in UTC, ``2026-01-01T00:00:00.000001Z``, without the fraction when it is
  zero (what pydantic writes for the API's datetimes);
- values: pydantic-core's own JSON float writer, run once over the block's values (the
  shortest text that reads back to the same double, ``NaN``, ``Infinity``, ``-Infinity``), so
  a page is byte for byte what ``ReadMetricSeriesResponse.model_dump_json()`` gives;
- a series' host, process index and labels: written once per series, then gathered.
"""

import csv
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pydantic_core

from mldiag_platform.errors import InvalidArgument
from mldiag_run_registry.metrics.blocks import Float64s, Int64s, PointBlock
from mldiag_schemas.telemetry import ReadMetricSeriesResponse, SeriesPoint

Bytes2D = npt.NDArray[np.uint8]


class ExportFormat(StrEnum):
    """The text formats a whole metric can be exported in."""

    CSV = "csv"
    JSONL = "jsonl"

    @property
    def media_type(self) -> str:
        """The Content-Type of an export in this format."""
        return "text/csv; charset=utf-8" if self is ExportFormat.CSV else "application/jsonl"


CSV_HEADER = b"step,value,time,host,processIndex,labels\n"
"""The first line of a CSV export."""

_MAX_TIME_US = 253_402_300_800_000_000
"""0001-… to 9999-12-31: the years a 4-digit RFC 3339 time can spell (µs since 1970)."""
_MIN_TIME_US = -62_135_596_800_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WIDEST_NUMBER = 24
"""Characters of the longest number JSON can hold here (``-1.7976931348623157e+308``; an
int64 takes 20)."""
_DAY_US = 86_400_000_000


class SeriesIdentity(Protocol):
    """What a line says about the series of its point."""

    @property
    def host(self) -> str:
        """Host that recorded the series."""
        ...

    @property
    def process_index(self) -> int | None:
        """Process on the host."""
        ...

    @property
    def labels(self) -> dict[str, str]:
        """The series' labels."""
        ...


@cache
def _groups() -> Bytes2D:
    """Rows 0-999: a 3-digit group zero-padded; 1000-1999: the same without leading zeros
    (NUL instead); 2000: nothing (three NULs)."""
    padded = np.frombuffer("".join(f"{i:03d}" for i in range(1000)).encode(), np.uint8)
    padded = padded.reshape(1000, 3)
    bare = padded.copy()
    bare[:100, 0] = 0
    bare[:10, 1] = 0
    return np.concatenate([padded, bare, np.zeros((1, 3), np.uint8)])


@cache
def _clock() -> Bytes2D:
    """``THH:MM:SS`` of every second of a day (86,400 rows of 9 bytes)."""
    second = np.arange(86_400)
    digits = _groups()
    table = np.empty((86_400, 9), np.uint8)
    table[:, 0] = ord("T")
    table[:, 1:3] = digits[second // 3600, 1:]
    table[:, 3] = ord(":")
    table[:, 4:6] = digits[second // 60 % 60, 1:]
    table[:, 6] = ord(":")
    table[:, 7:9] = digits[second % 60, 1:]
    return table


@dataclass(frozen=True, slots=True)
class _Piece:
    """A column of the text: its width, and how it writes its bytes into a (rows, width)
    view of the block's matrix (every byte of it: NUL where the item is shorter)."""

    width: int
    fill: Callable[[Bytes2D], None]


def _integers(numbers: Int64s) -> _Piece:
    """Non-negative integers in decimal (NUL-padded on the left)."""
    if len(numbers) and int(numbers.min()) < 0:
        return _tokens(numbers.tolist())
    count = 1
    highest = int(numbers.max()) if len(numbers) else 0
    while count < 7 and highest >= 1000**count:
        count += 1

    def fill(view: Bytes2D) -> None:
        # the group holding the first significant digit; groups above it are left empty
        top = np.zeros(len(numbers), np.int64)
        for k in range(1, count):
            top += numbers >= 1000**k
        table = _groups()
        for k in range(count):
            group = numbers // 1000**k % 1000
            row = np.where(k < top, group, np.where(k == top, group + 1000, 2000))
            view[:, 3 * (count - 1 - k) : 3 * (count - k)] = table[row]

    return _Piece(3 * count, fill)


def _times(micros: Int64s) -> _Piece:
    """RFC 3339 UTC times, ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` (27 bytes)."""
    if len(micros) and (int(micros.min()) < _MIN_TIME_US or int(micros.max()) >= _MAX_TIME_US):
        # outside 4-digit years: nothing pydantic could write either; say it plainly
        raise ValueError("a point's time is outside the years 1 to 9999")

    def fill(view: Bytes2D) -> None:
        days, within = np.divmod(micros, _DAY_US)
        seconds, fraction = np.divmod(within, 1_000_000)
        if len(micros):
            first, last = int(days.min()), int(days.max())
            if last - first < 4096:
                dates = _dates(np.arange(first, last + 1, dtype=np.int64))
                view[:, :10] = dates[days - first]
            else:
                unique, where = np.unique(days, return_inverse=True)
                view[:, :10] = _dates(unique)[where]
        digits = _groups()
        view[:, 10:19] = _clock()[seconds]
        view[:, 19] = ord(".")
        view[:, 20:23] = digits[fraction // 1000]
        view[:, 23:26] = digits[fraction % 1000]
        view[:, 26] = ord("Z")
        view[fraction == 0, 19:26] = 0

    return _Piece(27, fill)


def _dates(days: Int64s) -> Bytes2D:
    """``YYYY-MM-DD`` of days since 1970 (a few rows: one per distinct day)."""
    text = np.datetime_as_string(days.astype("datetime64[D]"), unit="D").astype("S10")
    return text.view(np.uint8).reshape(len(days), 10)


def _tokens(items: list[float] | list[int]) -> _Piece:
    """Numbers as pydantic-core writes them in JSON (NaN and ±Inf as ``NaN``,
    ``Infinity``, ``-Infinity``), NUL-padded on the right."""
    count = len(items)
    if not count:
        return _Piece(0, lambda _view: None)
    # the list's JSON without its '[': numbers hold no comma, so commas split them; the NULs
    # after it let every row read a whole width past its start
    written = pydantic_core.to_json(items, inf_nan_mode="constants")
    text = np.frombuffer(written[1:-1] + bytes(_WIDEST_NUMBER), np.uint8)
    commas = np.flatnonzero(text == ord(","))
    starts = np.empty(count, np.int64)
    starts[0] = 0
    starts[1:] = commas + 1
    lengths = np.empty(count, np.int64)
    lengths[:-1] = commas - starts[:-1]
    lengths[-1] = len(written) - 2 - starts[-1]

    shortest = int(lengths.min())

    def fill(view: Bytes2D) -> None:
        # column by column: one gather over the items per character position (fewer and
        # cheaper passes than scattering every byte to its row); every item reaches the
        # first `shortest` columns
        for column in range(shortest):
            view[:, column] = text[starts + column]
        for column in range(shortest, view.shape[1]):
            view[:, column] = np.where(lengths > column, text[starts + column], 0)

    return _Piece(int(lengths.max()), fill)


def _constant(text: bytes) -> _Piece:
    row = np.frombuffer(text, np.uint8)

    def fill(view: Bytes2D) -> None:
        view[:] = row

    return _Piece(len(text), fill)


def _table(pieces: Sequence[bytes]) -> Bytes2D:
    """Byte strings as rows of one matrix, NUL-padded on the right."""
    width = max((len(piece) for piece in pieces), default=0)
    return np.array(pieces, dtype=f"S{max(width, 1)}").view(np.uint8).reshape(len(pieces), -1)


def _per_series(block: PointBlock, pieces: Mapping[int, bytes]) -> _Piece:
    """Each point's series piece (its host, process and labels as the format spells them)."""
    if len(pieces) == 1:
        return _constant(next(iter(pieces.values())))
    ids = np.fromiter(pieces, np.int64, len(pieces))
    order = np.argsort(ids)
    table = _table([pieces[int(series_id)] for series_id in ids[order]])

    def fill(view: Bytes2D) -> None:
        view[:] = table[np.searchsorted(ids[order], block.series_ids)]

    return _Piece(table.shape[1], fill)


def _text(rows: int, pieces: Sequence[_Piece]) -> bytes:
    """The pieces side by side, row after row, without the NUL padding: each writes its
    columns of one matrix (no column is built apart and copied again)."""
    matrix = np.empty((rows, sum(piece.width for piece in pieces)), np.uint8)
    at = 0
    for piece in pieces:
        piece.fill(matrix[:, at : at + piece.width])
        at += piece.width
    flat = matrix.reshape(-1)
    text: bytes = flat[flat != 0].tobytes()
    return text


def _json_suffix(series: SeriesIdentity) -> str:
    """``,"host":…,"processIndex":…,"labels":{…}}`` as pydantic writes a point's tail."""
    point = SeriesPoint(
        step=0,
        value=0.0,
        time=_EPOCH,
        host=series.host,
        process_index=series.process_index,
        labels=series.labels,
    )
    text = point.model_dump_json()
    return text[text.index(',"host":') :]


def _json_lines(block: PointBlock, series: Mapping[int, SeriesIdentity], end: bytes) -> bytes:
    """Every point as the API's JSON object (``SeriesPoint``), each followed by ``end``."""
    rows = len(block)
    if not rows:
        return b""
    tails = {
        series_id: _json_suffix(identity).encode() + end for series_id, identity in series.items()
    }
    return _text(
        rows,
        [
            _constant(b'{"step":'),
            _integers(block.steps),
            _constant(b',"value":'),
            _tokens(block.values.tolist()),
            _constant(b',"time":"'),
            _times(block.times_us),
            _constant(b'"'),
            _per_series(block, tails),
        ],
    )


def page_json(
    metric: str, block: PointBlock, series: Mapping[int, SeriesIdentity], next_page_token: str
) -> bytes:
    """A page as ``ReadMetricSeriesResponse`` JSON, byte for byte what pydantic would write
    for the same points (the identity of every point from ``series``, by series id)."""
    shell = ReadMetricSeriesResponse(
        metric=metric, points=[], next_page_token=next_page_token
    ).model_dump_json()
    head, tail = shell.split('"points":[]', 1)
    points = _json_lines(block, series, b",")[:-1]
    return b"".join((head.encode(), b'"points":[', points, b"]", tail.encode()))


def jsonl_lines(block: PointBlock, series: Mapping[int, SeriesIdentity]) -> bytes:
    """Lines of a JSON Lines export: one point (the API's point object) a line."""
    return _json_lines(block, series, b"\n")


def _csv_suffix(series: SeriesIdentity) -> bytes:
    out = io.StringIO()
    labels = json.dumps(series.labels, ensure_ascii=False, separators=(",", ":"))
    process = "" if series.process_index is None else str(series.process_index)
    csv.writer(out, lineterminator="\n").writerow([series.host, process, labels])
    return ("," + out.getvalue()).encode()


def csv_lines(block: PointBlock, series: Mapping[int, SeriesIdentity]) -> bytes:
    """Lines of a CSV export (after :data:`CSV_HEADER`): step, value, time, host, process
    index, labels (a JSON object); fields quoted as RFC 4180 says where needed."""
    rows = len(block)
    if not rows:
        return b""
    tails = {series_id: _csv_suffix(identity) for series_id, identity in series.items()}
    comma = _constant(b",")
    return _text(
        rows,
        [
            _integers(block.steps),
            comma,
            _tokens(block.values.tolist()),
            comma,
            _times(block.times_us),
            _per_series(block, tails),
        ],
    )


def lines(
    export_format: ExportFormat, block: PointBlock, series: Mapping[int, SeriesIdentity]
) -> bytes:
    """A block's lines in ``export_format``."""
    if export_format is ExportFormat.CSV:
        return csv_lines(block, series)
    return jsonl_lines(block, series)


def concatenate(blocks: Sequence[PointBlock]) -> PointBlock:
    """Blocks one after the other as one block (their order kept)."""
    if len(blocks) == 1:
        return blocks[0]
    if not blocks:
        return PointBlock.empty()
    steps: Int64s = np.concatenate([b.steps for b in blocks])
    series_ids: Int64s = np.concatenate([b.series_ids for b in blocks])
    times: Int64s = np.concatenate([b.times_us for b in blocks])
    values: Float64s = np.concatenate([b.values for b in blocks])
    return PointBlock(steps, series_ids, times, values)


class InvalidExportFormat(InvalidArgument):
    """``format`` of an export names no known format."""

    code = "invalid_export_format"


def parse_format(text: str) -> ExportFormat:
    """The format ``text`` names, or ``invalid_export_format``."""
    try:
        return ExportFormat(text)
    except ValueError:
        known = ", ".join(member.value for member in ExportFormat)
        raise InvalidExportFormat(
            f"format must be one of {known}", details=[{"field": "format", "value": text[:40]}]
        ) from None

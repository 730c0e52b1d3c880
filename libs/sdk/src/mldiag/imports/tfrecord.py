"""TFRecord framing, the container of TensorBoard's event files.

Each record is ``uint64 length``, ``uint32 masked_crc32c(length)``, ``data``,
``uint32 masked_crc32c(data)``, all little-endian (TensorFlow's
``tensorflow/core/lib/io/record_writer.cc``). Both checksums are verified. A writer that is
still running leaves a partial record at the end of its file: that is where reading stops,
quietly, and a later import picks the record up once it is whole. A checksum that does not
match is damage, reported by :class:`CorruptRecord` with the offset.

CRC-32C comes from ``google_crc32c`` (a C extension many Google client libraries already
install) when it can be imported, else from the table-driven Python below (about 8 MB/s:
a few seconds for a million scalars, minutes for a log directory full of images), so the
SDK needs no compiled dependency of its own.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


def _table() -> tuple[int, ...]:
    polynomial = 0x82F63B78  # Castagnoli, reflected
    rows = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ polynomial if crc & 1 else crc >> 1
        rows.append(crc)
    return tuple(rows)


_CRC_TABLE = _table()


@functools.cache
def _native() -> Callable[[bytes], int] | None:
    try:
        import google_crc32c  # noqa: PLC0415  # optional: only its C build is worth having
    except ImportError:
        return None
    if google_crc32c.implementation != "c":
        return None
    value: Callable[[bytes], int] = google_crc32c.value
    return value


def crc32c(data: bytes) -> int:
    """The CRC-32C (Castagnoli) of ``data``."""
    native = _native()
    return crc32c_python(data) if native is None else native(data)


def crc32c_python(data: bytes) -> int:
    """The CRC-32C of ``data``, computed in Python (what :func:`crc32c` falls back to)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: the CRC rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class CorruptRecord(Exception):  # a finding about a file, not a failure of ours
    """A record whose checksum does not match: the file is damaged at ``offset``."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at byte {offset}: {reason}")
        self.offset = offset
        """Where the damaged record starts in the file."""
        self.reason = reason
        """Which checksum failed."""


def read_records(stream: BinaryIO) -> Iterator[bytes]:
    """Every whole record of ``stream`` in order; stops at a partial last record, raises
    :class:`CorruptRecord` at a checksum that does not match."""
    offset = 0
    while True:
        header = stream.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # end of file, or a header still being written
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            raise CorruptRecord(offset, "the length's checksum does not match")
        data = stream.read(length)
        footer = stream.read(_FOOTER.size)
        if len(data) < length or len(footer) < _FOOTER.size:
            return  # a record still being written
        if masked_crc32c(data) != _FOOTER.unpack(footer)[0]:
            raise CorruptRecord(offset, "the data's checksum does not match")
        yield data
        offset += _HEADER.size + length + _FOOTER.size

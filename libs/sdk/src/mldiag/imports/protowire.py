"""A minimal reader of the protocol buffers wire format: enough to walk the few messages the
TensorBoard importer decodes (:mod:`mldiag.imports.tensorboard`).

Encoding reference: https://protobuf.dev/programming-guides/encoding/. Only the four wire
types protobuf 3 still writes are understood (varint, 64-bit, length-delimited, 32-bit);
the deprecated groups (3, 4) make the message unreadable, as they never occur in the
messages decoded here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2
FIXED32 = 5

Field = tuple[int, int, int | bytes]
"""One field as read: its number, its wire type, and its raw value (an int for varints and
fixed-width numbers, the bytes for length-delimited fields)."""


class WireError(ValueError):
    """The bytes are not a well-formed protocol buffer message."""


def read_varint(data: bytes, offset: int) -> tuple[int, int]:
    """The varint at ``offset`` and the offset just past it."""
    result = 0
    shift = 0
    while True:
        if offset >= len(data):
            raise WireError("truncated varint")
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset
        shift += 7
        if shift >= 70:  # ten bytes at most hold 64 bits
            raise WireError("varint longer than ten bytes")


def fields(data: bytes) -> Iterator[Field]:
    """Every field of one message, in the order written (repeated fields appear once each)."""
    offset = 0
    end = len(data)
    while offset < end:
        key, offset = read_varint(data, offset)
        number, wire_type = key >> 3, key & 0x7
        if wire_type == VARINT:
            value, offset = read_varint(data, offset)
            yield number, wire_type, value
        elif wire_type == FIXED64:
            if offset + 8 > end:
                raise WireError("truncated 64-bit field")
            yield number, wire_type, int.from_bytes(data[offset : offset + 8], "little")
            offset += 8
        elif wire_type == LENGTH_DELIMITED:
            size, offset = read_varint(data, offset)
            if offset + size > end:
                raise WireError("truncated length-delimited field")
            yield number, wire_type, data[offset : offset + size]
            offset += size
        elif wire_type == FIXED32:
            if offset + 4 > end:
                raise WireError("truncated 32-bit field")
            yield number, wire_type, int.from_bytes(data[offset : offset + 4], "little")
            offset += 4
        else:
            raise WireError(f"unsupported wire type {wire_type} (field {number})")


def as_double(raw: int) -> float:
    """A ``double`` field's value from its 64 raw bits."""
    value: float = struct.unpack("<d", raw.to_bytes(8, "little"))[0]
    return value


def as_float(raw: int) -> float:
    """A ``float`` field's value from its 32 raw bits."""
    value: float = struct.unpack("<f", raw.to_bytes(4, "little"))[0]
    return value


def as_int64(raw: int) -> int:
    """An ``int64`` varint's signed value (negative numbers are written as 64-bit two's
    complement)."""
    raw &= (1 << 64) - 1
    return raw - (1 << 64) if raw >= 1 << 63 else raw


def packed_varints(data: bytes) -> list[int]:
    """The values of a packed repeated varint field."""
    values: list[int] = []
    offset = 0
    while offset < len(data):
        value, offset = read_varint(data, offset)
        values.append(value)
    return values

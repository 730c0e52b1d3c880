"""TFRecord framing: CRC-32C, a record still being written, a damaged record."""

import io
import struct

import pytest

from mldiag.imports.tfrecord import (
    CorruptRecord,
    crc32c,
    crc32c_python,
    masked_crc32c,
    read_records,
)


def record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", masked_crc32c(length))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


def test_crc32c_matches_the_castagnoli_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720's check value
    assert crc32c(b"") == 0


def test_the_python_crc_agrees_with_the_native_one_when_there_is_one() -> None:
    data = bytes(range(256)) * 41 + b"tail"
    assert crc32c_python(b"123456789") == 0xE3069283
    assert crc32c_python(data) == crc32c(data)


def test_records_are_read_in_order() -> None:
    stream = io.BytesIO(record(b"first") + record(b"") + record(b"third"))
    assert list(read_records(stream)) == [b"first", b"", b"third"]


@pytest.mark.parametrize("cut", [3, 12, 14, 20])
def test_a_partial_last_record_ends_the_file_quietly(cut: int) -> None:
    whole = record(b"kept")
    partial = record(b"being written")[:cut]
    assert list(read_records(io.BytesIO(whole + partial))) == [b"kept"]


def test_a_damaged_record_is_reported_with_its_offset() -> None:
    first = record(b"kept")
    damaged = bytearray(record(b"damaged"))
    damaged[14] ^= 0xFF  # a byte of the data
    records = read_records(io.BytesIO(first + bytes(damaged)))
    assert next(records) == b"kept"
    with pytest.raises(CorruptRecord) as error:
        next(records)
    assert error.value.offset == len(first)
    assert "data" in error.value.reason


def test_a_damaged_length_is_reported() -> None:
    damaged = bytearray(record(b"x"))
    damaged[0] ^= 0x01
    with pytest.raises(CorruptRecord, match="length"):
        list(read_records(io.BytesIO(bytes(damaged))))

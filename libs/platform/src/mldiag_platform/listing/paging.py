"""Page sizes and opaque keyset page tokens shared by every list API.

A token comes back from the caller, so what it carries is checked like any input before it
reaches a query: times must be time-zone aware and within what PostgreSQL stores, integers
within a bigint, text without NUL.
"""

import base64
import binascii
import hashlib
import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

import pydantic_core

from mldiag_platform.errors import InvalidPageSize, InvalidPageToken
from mldiag_platform.listing.filtering import OrderKey

INT32_MAX = 2**31 - 1
"""The largest value of a PostgreSQL ``integer``."""

INT64_MAX = 2**63 - 1
"""The largest value of a PostgreSQL ``bigint``."""

INT64_MIN = -(2**63)
"""The smallest value of a PostgreSQL ``bigint``."""


def page_size(requested: int | None, default: int, maximum: int) -> int:
    """The effective page size: the default when unset (or 0), capped at ``maximum``."""
    if requested is None or requested == 0:
        return default
    if requested < 0:
        raise InvalidPageSize(
            f"pageSize must be positive, got {requested}",
            details=[{"field": "pageSize", "problem": "must be positive"}],
        )
    return min(requested, maximum)


def encode_token(fields: dict[str, Any]) -> str:
    """An opaque token carrying a keyset position."""
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


def decode_token(token: str) -> dict[str, Any]:
    """The keyset position a token carries, or :class:`InvalidPageToken`."""
    try:
        # jiter bounds nesting, where json.loads would raise RecursionError on a deep token
        fields = pydantic_core.from_json(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError):
        raise InvalidPageToken("the page token is not valid") from None
    if not isinstance(fields, dict):
        raise InvalidPageToken("the page token is not valid")
    return fields


def token_time(value: object) -> datetime:
    """A time a token carries (ISO 8601 with a zone), or :class:`InvalidPageToken`."""
    try:
        parsed = datetime.fromisoformat(str(value))
        # In UTC, as the driver sends it: `0001-01-01T00:00:00+14:00` has no UTC time.
        in_utc = parsed.astimezone(UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):
        in_utc = None
    if in_utc is None:
        raise InvalidPageToken("the page token is not valid")
    return in_utc


def token_int(value: object) -> int:
    """An integer a token carries, within a bigint, or :class:`InvalidPageToken`."""
    if isinstance(value, bool) or not isinstance(value, int) or not INT64_MIN <= value <= INT64_MAX:
        raise InvalidPageToken("the page token is not valid")
    return value


def token_text(value: object) -> str:
    """A string a token carries, without NUL, or :class:`InvalidPageToken`."""
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidPageToken("the page token is not valid")
    return value


def query_digest(filter_text: str, order_by: str) -> str:
    """A short digest of a list's query: a keyset token carries it, so a token is refused
    for another filter or order."""
    return hashlib.sha256(f"{filter_text}\0{order_by}".encode()).hexdigest()[:16]


def keyset_token(values: Sequence[object], query: str) -> str:
    """The token of the position after a page's last row: its values of the order keys
    (times as ISO 8601) and the :func:`query_digest` it was listed with."""
    keys = [value.isoformat() if isinstance(value, datetime) else value for value in values]
    return encode_token({"k": keys, "q": query})


def keyset_position(
    token: str, order: Sequence[OrderKey], query: str, timestamps: Collection[str]
) -> list[object]:
    """The values of :func:`keyset_token`, one per key of ``order`` (times for the fields
    in ``timestamps``, text for the others), or :class:`InvalidPageToken`."""
    fields = decode_token(token)
    values = fields.get("k")
    if fields.get("q") != query or not isinstance(values, list) or len(values) != len(order):
        raise InvalidPageToken("the page token is not valid for this filter and orderBy")
    return [
        token_time(value) if key.field in timestamps else token_text(value)
        for key, value in zip(order, values, strict=True)
    ]

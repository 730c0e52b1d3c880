"""Page sizes and opaque keyset page tokens shared by every list in the registry.

A token comes back from the caller, so what it carries is checked like any input before it
reaches a query: times must be time-zone aware and within what PostgreSQL stores, integers
within a bigint, text without NUL.
"""

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any

import pydantic_core

from mldiag_run_registry.errors import InvalidPageSize, InvalidPageToken

INT32_MAX = 2**31 - 1
"""The largest value of a PostgreSQL ``integer``."""

INT64_MAX = 2**63 - 1
"""The largest value of a PostgreSQL ``bigint``."""

INT64_MIN = -(2**63)
"""The smallest value of a PostgreSQL ``bigint``."""


def page_size(requested: int | None, default: int, maximum: int) -> int:
    """The effective page size: the default when unset, capped at ``maximum``."""
    if requested is None or requested == 0:
        return default
    if requested < 0:
        raise InvalidPageSize(f"pageSize must be positive, got {requested}")
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

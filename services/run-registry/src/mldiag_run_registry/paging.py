"""Page sizes and opaque keyset page tokens shared by every list in the registry."""

import base64
import binascii
import json
from typing import Any

from mldiag_run_registry.errors import InvalidPageSize, InvalidPageToken


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
        fields = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError):
        raise InvalidPageToken("the page token is not valid") from None
    if not isinstance(fields, dict):
        raise InvalidPageToken("the page token is not valid")
    return fields

"""Share tokens: what a link opens and until when, signed with HMAC-SHA256.

``mldiag_share_<payload>.<signature>``, both base64url without padding; the payload is a
small JSON object. A token names its link, so revoking the link revokes the token.
"""

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from mldiag_run_registry.shares.errors import ShareLinkInvalid
from mldiag_schemas.sharing import SHARE_TOKEN_PREFIX

_VERSION = 1


@dataclass(frozen=True)
class SignedClaims:
    """What a share token says."""

    link_id: str
    resource: str
    expire_time: datetime


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, payload: str) -> str:
    return _encode(hmac.new(key, (SHARE_TOKEN_PREFIX + payload).encode(), hashlib.sha256).digest())


def is_share_token(secret: str) -> bool:
    """Whether a bearer secret is a share token (rather than an API token)."""
    return secret.startswith(SHARE_TOKEN_PREFIX)


def sign(key: bytes, claims: SignedClaims) -> str:
    """The token for ``claims``."""
    body = {
        "v": _VERSION,
        "id": claims.link_id,
        "res": claims.resource,
        "exp": int(claims.expire_time.timestamp()),
    }
    payload = _encode(json.dumps(body, separators=(",", ":")).encode())
    return f"{SHARE_TOKEN_PREFIX}{payload}.{_signature(key, payload)}"


def verify(key: bytes, token: str) -> SignedClaims:
    """The claims of a token this key signed, or ``share_link_invalid``.

    Expiry is the caller's to check, so an expired link can be told apart from a forged one.
    """
    payload, dot, signature = token.removeprefix(SHARE_TOKEN_PREFIX).partition(".")
    # As bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
    expected = _signature(key, payload).encode()
    if not dot or not hmac.compare_digest(signature.encode(), expected):
        raise ShareLinkInvalid("the share link is not valid (altered, truncated or forged)")
    try:
        body = json.loads(_decode(payload))
    except (binascii.Error, ValueError):
        body = None
    if not isinstance(body, dict) or body.get("v") != _VERSION:
        # Signed by us but unreadable: only a key shared with another version could do that.
        raise ShareLinkInvalid("the share link's contents are not readable")
    try:
        return SignedClaims(
            link_id=str(body["id"]),
            resource=str(body["res"]),
            expire_time=datetime.fromtimestamp(int(body["exp"]), UTC),
        )
    except (ValueError, KeyError, TypeError):
        raise ShareLinkInvalid("the share link's contents are not readable") from None

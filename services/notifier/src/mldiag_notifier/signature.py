"""The webhook signature: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``."""

import hashlib
import hmac

TOLERANCE_SECONDS = 300
"""A receiver refuses a signature older (or newer) than this."""


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str, header: str, body: bytes, now: float, tolerance: float = TOLERANCE_SECONDS
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within ``tolerance`` of ``now``
    (what a receiver does; the tests use it as one)."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    expected = sign(secret, body, timestamp).rsplit("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))

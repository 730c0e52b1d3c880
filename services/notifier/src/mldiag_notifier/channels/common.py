"""What every channel shares: the outcome of an attempt and an HTTP POST that tells a
refusal for good (4xx) from one worth retrying (5xx, 408, 429, no answer)."""

from dataclasses import dataclass
from typing import Any

import httpx

from mldiag_schemas.alerts import Notification

RETRYABLE_4XX = frozenset({408, 429})
"""Client errors a later attempt may get past (timeout, too many requests)."""


class DeliveryFailed(Exception):
    """An attempt failed; ``permanent`` when no later attempt can succeed."""

    def __init__(self, reason: str, *, permanent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason[:500]
        self.permanent = permanent


@dataclass(frozen=True)
class Outgoing:
    """One notification about to go to one channel."""

    delivery_id: str
    notification: Notification
    body: bytes
    """The notification's JSON (camelCase), as a webhook receives it."""
    timeout: float


async def post(
    client: httpx.AsyncClient,
    url: str,
    outgoing: Outgoing,
    *,
    content: bytes | None = None,
    json: Any = None,
    headers: dict[str, str] | None = None,
) -> None:
    """POST to ``url``; :class:`DeliveryFailed` unless the answer is 2xx."""
    try:
        response = await client.post(
            url, content=content, json=json, headers=headers, timeout=outgoing.timeout
        )
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise DeliveryFailed(f"not a usable URL: {type(exc).__name__}", permanent=True) from None
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}"[:300] or "no answer") from None
    if response.is_success:
        return
    status = response.status_code
    permanent = 400 <= status < 500 and status not in RETRYABLE_4XX
    snippet = response.text[:200].strip()
    raise DeliveryFailed(
        f"HTTP {status}" + (f": {snippet}" if snippet else ""), permanent=permanent
    )

"""WEBHOOK: POST the notification's JSON, signed with the channel's signing secret."""

import time

import httpx

from mldiag_notifier.channels.common import Outgoing, post
from mldiag_notifier.signature import sign
from mldiag_schemas.alerts import DELIVERY_HEADER, SIGNATURE_HEADER


async def send_webhook(
    client: httpx.AsyncClient, config: dict[str, str], secrets: dict[str, str], outgoing: Outgoing
) -> None:
    """One signed POST of the notification to ``config["url"]``."""
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(secrets.get("signingSecret", ""), outgoing.body, int(time.time())),
        DELIVERY_HEADER: outgoing.delivery_id,
    }
    await post(client, config["url"], outgoing, content=outgoing.body, headers=headers)

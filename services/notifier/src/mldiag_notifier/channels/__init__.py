"""The channel kinds, one module each, and :func:`send`, which picks the one a channel is."""

import httpx

from mldiag_notifier.channels.alertmanager import send_alertmanager
from mldiag_notifier.channels.apprise import send_apprise
from mldiag_notifier.channels.common import DeliveryFailed, Outgoing
from mldiag_notifier.channels.email import send_email
from mldiag_notifier.channels.slack import send_slack
from mldiag_notifier.channels.webhook import send_webhook
from mldiag_schemas.alerts import ChannelKind

__all__ = ["DeliveryFailed", "Outgoing", "send"]


async def send(
    client: httpx.AsyncClient,
    kind: ChannelKind,
    config: dict[str, str],
    secrets: dict[str, str],
    outgoing: Outgoing,
) -> None:
    """One attempt to deliver ``outgoing`` through a channel of ``kind``;
    :class:`DeliveryFailed` says why not."""
    match kind:
        case ChannelKind.WEBHOOK:
            await send_webhook(client, config, secrets, outgoing)
        case ChannelKind.SLACK:
            await send_slack(client, config, secrets, outgoing)
        case ChannelKind.ALERTMANAGER:
            await send_alertmanager(client, config, secrets, outgoing)
        case ChannelKind.EMAIL:
            await send_email(config, secrets, outgoing)
        case ChannelKind.APPRISE:
            await send_apprise(config, secrets, outgoing)

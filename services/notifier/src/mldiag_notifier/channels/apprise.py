"""APPRISE: any service the Apprise library knows, from the channel's (secret) URLs."""

import asyncio

import apprise

from mldiag_notifier.channels.common import DeliveryFailed, Outgoing
from mldiag_notifier.channels.text import detail_lines


def _notify(urls: list[str], title: str, body: str) -> None:
    sender = apprise.Apprise()
    for url in urls:
        if not sender.add(url):
            # Say which scheme, never the URL itself: it holds the credentials.
            scheme = url.split("://", 1)[0][:20]
            raise DeliveryFailed(f"Apprise does not understand a {scheme}:// URL", permanent=True)
    if not sender.notify(body=body, title=title):
        raise DeliveryFailed("Apprise could not notify every service")


async def send_apprise(config: dict[str, str], secrets: dict[str, str], outgoing: Outgoing) -> None:
    """Notify every URL (Apprise is synchronous: it runs in a thread)."""
    del config  # an Apprise channel's only setting is its (secret) URLs
    notification = outgoing.notification
    body = "\n".join(detail_lines(notification)) or notification.summary
    await asyncio.to_thread(_notify, secrets["urls"].split(), notification.summary, body)

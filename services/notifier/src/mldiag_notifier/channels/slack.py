"""SLACK: an incoming webhook, with the summary as text and the details as Block Kit."""

import httpx

from mldiag_notifier.channels.common import Outgoing, post
from mldiag_notifier.channels.text import detail_lines

_SECTION_LIMIT = 2900  # Slack refuses a section text over 3000 characters


async def send_slack(
    client: httpx.AsyncClient, config: dict[str, str], secrets: dict[str, str], outgoing: Outgoing
) -> None:
    """One POST of ``{"text", "blocks"}`` to the secret ``webhookUrl``."""
    del config  # a Slack channel's only setting is its (secret) webhook URL
    notification = outgoing.notification
    details = "\n".join(detail_lines(notification))[:_SECTION_LIMIT]
    blocks: list[dict[str, object]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{notification.summary}*"}},
    ]
    if details:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": details}})
    message = {"text": notification.summary, "blocks": blocks}
    await post(client, secrets["webhookUrl"], outgoing, json=message)

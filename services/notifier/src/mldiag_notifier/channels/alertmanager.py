"""ALERTMANAGER: ``POST {url}/api/v2/alerts``, firing on open and resolved on resolve."""

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from mldiag_notifier.channels.common import Outgoing, post
from mldiag_notifier.channels.text import detail_lines
from mldiag_schemas.alerts import NotificationKind

TEST_ALERT_SECONDS = 300
"""A test alert resolves itself after this long."""


def alerts(outgoing: Outgoing) -> list[dict[str, Any]]:
    """The Alertmanager alerts of one notification (one alert)."""
    notification = outgoing.notification
    event = notification.event
    now = datetime.now(UTC)
    labels = {"alertname": "mldiag-test", "severity": "INFO"}
    starts: datetime = now
    ends: datetime | None = now + timedelta(seconds=TEST_ALERT_SECONDS)
    if event is not None:
        labels = {
            "alertname": event.type.value,
            "run": event.run_id,
            "severity": event.severity.value,
            "event_id": str(event.event_id),
        }
        starts, ends = event.start_time, None
        if notification.kind is NotificationKind.RESOLVED:
            ends = event.end_time or now
    cause = notification.top_cause
    alert: dict[str, Any] = {
        "labels": labels,
        "annotations": {
            "summary": notification.summary,
            "description": "\n".join(detail_lines(notification)),
            "cause": f"{cause.analyzer}: {cause.details}" if cause else "",
        },
        "startsAt": starts.isoformat(),
        "generatorURL": notification.link,
    }
    if ends is not None:
        alert["endsAt"] = ends.isoformat()
    return [alert]


async def send_alertmanager(
    client: httpx.AsyncClient, config: dict[str, str], secrets: dict[str, str], outgoing: Outgoing
) -> None:
    """One POST of the alert (with the bearer token when one is set)."""
    headers = {}
    if token := secrets.get("bearerToken"):
        headers["Authorization"] = f"Bearer {token}"
    url = config["url"].rstrip("/") + "/api/v2/alerts"
    await post(client, url, outgoing, json=alerts(outgoing), headers=headers)

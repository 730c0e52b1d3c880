"""A small client of the alerts API (the notifier, behind the one base URL): notification
channels, the alert rules that route workload events to them, and the delivery history.

As in :mod:`mldiag.api_client`, answers are the API's JSON bodies as plain dicts and errors
are :class:`~mldiag.api_client.ApiError` (the API's stable ``code``, e.g.
``channel_not_found``, ``channel_in_use``) or :class:`~mldiag.api_client.ApiUnreachable`.
A channel's secrets are write only: no answer carries them, only their names
(``secretKeys``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mldiag._training import parse_resource_name
from mldiag.api_client import JsonObject, _ScopedClient

SERVICE = "notifier"
"""The service named in :class:`~mldiag.api_client.ApiUnreachable` for the alerts API."""
CHANNELS = "notificationChannels"
"""The collection of channels (and the key of their list page)."""
RULES = "alertRules"
"""The collection of alert rules (and the key of their list page)."""
DELIVERIES = "notificationDeliveries"
"""The collection of deliveries (and the key of their list page)."""

__all__ = ["CHANNELS", "DELIVERIES", "RULES", "AlertsClient", "deliveries_filter"]


def deliveries_filter(
    *, event_id: str = "", run_id: str = "", channel: str = "", state: str = ""
) -> str:
    """The ``filter`` of a deliveries list (``eventId="…" AND state="…"``); empty parts are
    left out."""
    parts = [
        f'{key}="{value}"'
        for key, value in (
            ("eventId", event_id),
            ("runId", run_id),
            ("channel", channel),
            ("state", state),
        )
        if value
    ]
    return " AND ".join(parts)


class AlertsClient(_ScopedClient):
    """Calls the alerts API at ``base_url`` (the one base URL of ``mldiag up``).

    ``project`` and ``location`` select the long resource form
    ``/v1/projects/{p}/locations/{l}/...``; with neither, the short ``/v1/`` form (the
    default project and location). A reference to a channel or rule is its id or its full
    name.
    """

    _service = SERVICE

    def _path(self, collection: str, reference: str, suffix: str = "") -> str:
        project, location, resource = parse_resource_name(reference, collection)
        if project is not None:  # a full name: its own project and location
            return f"/v1/projects/{project}/locations/{location}/{collection}/{resource}{suffix}"
        return f"{self._prefix}/{collection}/{resource}{suffix}"

    def _every(self, collection: str, filter: str, page_size: int | None) -> Iterator[JsonObject]:
        token = ""
        while True:
            page = self._json(
                "GET",
                f"{self._prefix}/{collection}",
                params={"filter": filter, "pageSize": page_size or "", "pageToken": token},
            )
            yield from page.get(collection, [])
            token = page.get("nextPageToken", "")
            if not token:
                return

    # channels

    def create_channel(self, channel: JsonObject, channel_id: str = "") -> JsonObject:
        """Create a channel (``displayName``, ``kind``, ``config``, ``secrets``); its id is
        ``channel_id`` when given, else one made from the display name."""
        return self._json(
            "POST", f"{self._prefix}/{CHANNELS}", params={"channelId": channel_id}, json=channel
        )

    def get_channel(self, reference: str) -> JsonObject:
        """One channel (its secrets' names only)."""
        return self._json("GET", self._path(CHANNELS, reference))

    def iter_channels(self, *, page_size: int | None = None) -> Iterator[JsonObject]:
        """Every channel, page after page."""
        return self._every(CHANNELS, "", page_size)

    def update_channel(
        self, reference: str, channel: JsonObject, update_mask: Sequence[str]
    ) -> JsonObject:
        """Change the fields ``update_mask`` names (``displayName``, ``config``, ``secrets``,
        ``enabled``) to their values in ``channel``."""
        return self._json(
            "PATCH",
            self._path(CHANNELS, reference),
            params={"updateMask": ",".join(update_mask)},
            json=channel,
        )

    def delete_channel(self, reference: str) -> JsonObject:
        """Delete a channel (refused with ``channel_in_use`` while rules name it)."""
        return self._json("DELETE", self._path(CHANNELS, reference))

    def test_channel(self, reference: str) -> JsonObject:
        """Send one TEST notification through the channel now (no retries):
        ``{"delivered": bool, "error": str, "delivery": {...}}``."""
        return self._json("POST", self._path(CHANNELS, reference, ":test"), json={})

    # rules

    def create_rule(self, rule: JsonObject, rule_id: str = "") -> JsonObject:
        """Create an alert rule (``displayName``, ``channels`` and its criteria)."""
        return self._json("POST", f"{self._prefix}/{RULES}", params={"ruleId": rule_id}, json=rule)

    def get_rule(self, reference: str) -> JsonObject:
        """One alert rule."""
        return self._json("GET", self._path(RULES, reference))

    def iter_rules(self, *, page_size: int | None = None) -> Iterator[JsonObject]:
        """Every alert rule, page after page."""
        return self._every(RULES, "", page_size)

    def delete_rule(self, reference: str) -> JsonObject:
        """Delete an alert rule."""
        return self._json("DELETE", self._path(RULES, reference))

    # deliveries

    def iter_deliveries(
        self, *, filter: str = "", page_size: int | None = None
    ) -> Iterator[JsonObject]:
        """Deliveries, newest first (``filter`` from :func:`deliveries_filter`)."""
        return self._every(DELIVERIES, filter, page_size)

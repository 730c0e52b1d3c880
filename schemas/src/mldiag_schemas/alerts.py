"""Alerts: notification channels, the rules that route events to them, and deliveries.

The notifier consumes workload events (opened, resolved) and their analyses and delivers one
notification when an event opens (with its top cause, time lost and a link to it) and one
when it resolves, through the channels the matching rules name. Resources:

- ``projects/{p}/locations/{l}/notificationChannels/{channel}``
- ``projects/{p}/locations/{l}/alertRules/{rule}``
- ``projects/{p}/locations/{l}/notificationDeliveries/{delivery}`` (read only: the history)

A channel's secrets (a webhook's signing secret, a Slack webhook URL, an SMTP password, an
Apprise URL) are written once, stored encrypted and never returned: reads list their names.
"""

import enum
import re
import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field, model_validator

from mldiag_schemas.base import Contract
from mldiag_schemas.events import EventType, Severity, WorkloadEvent

RESOURCE_ID_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
"""A channel's or rule's id (chosen by the caller, else made from the display name)."""


class ChannelKind(enum.StrEnum):
    """How a channel delivers."""

    WEBHOOK = "WEBHOOK"
    """POST of the :class:`Notification` as JSON, signed (see :data:`SIGNATURE_HEADER`)."""
    SLACK = "SLACK"
    """A Slack incoming webhook (Block Kit message)."""
    EMAIL = "EMAIL"
    """Mail through an SMTP server."""
    ALERTMANAGER = "ALERTMANAGER"
    """Prometheus Alertmanager's ``/api/v2/alerts`` (firing on open, resolved on resolve)."""
    APPRISE = "APPRISE"
    """Any service the Apprise library knows (Discord, Teams, Telegram, PagerDuty, ntfy, …)."""


class ChannelField(Contract):
    """One setting of a channel kind."""

    name: str = Field(description="The key in `config` or `secrets`.")
    secret: bool = Field(description="Written in `secrets`, stored encrypted, never returned.")
    required: bool = Field(description="Whether a channel of this kind needs it.")
    description: str = Field(description="What it is.")


def _field(
    name: str, description: str, *, secret: bool = False, required: bool = False
) -> ChannelField:
    return ChannelField(name=name, secret=secret, required=required, description=description)


CHANNEL_FIELDS: dict[ChannelKind, tuple[ChannelField, ...]] = {
    ChannelKind.WEBHOOK: (
        _field("url", "The http(s) URL the notification is POSTed to.", required=True),
        _field(
            "signingSecret",
            "HMAC-SHA256 key of the signature header (made by the notifier when absent; the"
            " create response does not return it either: set it to know it).",
            secret=True,
        ),
    ),
    ChannelKind.SLACK: (
        _field("webhookUrl", "The Slack incoming-webhook URL.", secret=True, required=True),
    ),
    ChannelKind.EMAIL: (
        _field("to", "Recipients, comma-separated.", required=True),
        _field("from", "Sender address [mldiag@<host>]."),
        _field("smtpHost", "SMTP server host.", required=True),
        _field("smtpPort", "SMTP server port [25, or 465 with `tls=implicit`]."),
        _field("tls", "`none`, `starttls` or `implicit` [starttls when the server offers it]."),
        _field("username", "SMTP login user."),
        _field("password", "SMTP login password.", secret=True),
    ),
    ChannelKind.ALERTMANAGER: (
        _field("url", "Alertmanager's base URL, e.g. http://alertmanager:9093.", required=True),
        _field("bearerToken", "Sent as `Authorization: Bearer …`.", secret=True),
    ),
    ChannelKind.APPRISE: (
        _field(
            "urls",
            "Apprise URLs, whitespace-separated (e.g. `discord://…`, `ntfy://…`).",
            secret=True,
            required=True,
        ),
    ),
}
"""The settings each channel kind takes."""

SIGNATURE_HEADER = "X-Mldiag-Signature"
"""``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (a receiver recomputes it with
the channel's signing secret and refuses a timestamp older than five minutes)."""

DELIVERY_HEADER = "X-Mldiag-Delivery"
"""The delivery's id: the same on every retry, so a receiver can drop a repeat."""


def check_channel_settings(
    kind: ChannelKind, config: dict[str, str], secrets: dict[str, str], *, partial: bool
) -> None:
    """Refuse unknown keys, a secret in ``config`` (or the reverse) and, unless ``partial``
    (an update), a missing required setting. Raises ``ValueError`` naming the key."""
    fields = {field.name: field for field in CHANNEL_FIELDS[kind]}
    for where, values, secret in (("config", config, False), ("secrets", secrets, True)):
        for key in values:
            known = fields.get(key)
            if known is None:
                raise ValueError(f"{where}.{key}: a {kind} channel has no setting {key!r}")
            if known.secret != secret:
                other = "secrets" if known.secret else "config"
                raise ValueError(f"{where}.{key}: belongs in {other}")
    if not partial:
        for field in fields.values():
            given = secrets if field.secret else config
            if field.required and not given.get(field.name):
                where = "secrets" if field.secret else "config"
                raise ValueError(f"{where}.{field.name}: a {kind} channel needs it")
    url = config.get("url", "")
    if url and not re.match(r"^https?://[^\s/]+", url):
        raise ValueError("config.url: must be an http:// or https:// URL")


class NotificationChannel(Contract):
    """Where notifications go."""

    name: str = Field(default="", description="Resource name (output only).")
    channel_id: str = Field(
        default="",
        pattern=r"^$|" + RESOURCE_ID_PATTERN,
        description="Its id: given on create (`channelId` query parameter or here), else"
        " derived from the display name.",
    )
    display_name: str = Field(min_length=1, max_length=200, description="Shown to people.")
    kind: ChannelKind = Field(description="How it delivers.")
    config: dict[str, str] = Field(
        default_factory=dict, description="Settings that are not secret (see CHANNEL_FIELDS)."
    )
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description="Secret settings: write only, stored encrypted; always empty in responses.",
    )
    secret_keys: list[str] = Field(
        default_factory=list, description="Names of the secrets stored (output only)."
    )
    enabled: bool = Field(default=True, description="A disabled channel delivers nothing.")
    create_time: datetime | None = Field(default=None, description="Output only.")
    update_time: datetime | None = Field(default=None, description="Output only.")

    @model_validator(mode="after")
    def _settings_fit_the_kind(self) -> "NotificationChannel":
        # A stored channel (named) comes back without its secrets: only placement is checked.
        check_channel_settings(self.kind, self.config, self.secrets, partial=bool(self.name))
        return self


class ListNotificationChannelsResponse(Contract):
    """Channels, one page."""

    notification_channels: list[NotificationChannel] = Field(description="The channels.")
    next_page_token: str = Field(default="", description="Token of the next page.")


class AlertRule(Contract):
    """Which events go to which channels. An event matches when every set criterion holds
    (an empty list or map matches everything)."""

    name: str = Field(default="", description="Resource name (output only).")
    rule_id: str = Field(
        default="", pattern=r"^$|" + RESOURCE_ID_PATTERN, description="Its id (as channels)."
    )
    display_name: str = Field(min_length=1, max_length=200, description="Shown to people.")
    enabled: bool = Field(default=True, description="A disabled rule routes nothing.")
    event_types: list[EventType] = Field(
        default_factory=list, description="Event types it routes (empty: all)."
    )
    min_severity: Severity = Field(
        default=Severity.WARNING, description="Least severity it routes (INFO < WARNING < …)."
    )
    run_sets: list[str] = Field(
        default_factory=list, description="Run sets it routes (empty: all)."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, description="Run labels that must all be present with these values."
    )
    channels: list[str] = Field(min_length=1, description="Channel ids (or names) it delivers to.")
    notify_on_resolve: bool = Field(
        default=True, description="Also send one notification when the event resolves."
    )
    group_window_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="An event of a run opening within this long of another notified one of the"
        " same run and rule is grouped: sent once, with the others, at the window's end.",
    )
    max_per_hour: int = Field(
        default=30,
        ge=1,
        le=10_000,
        description="Notifications per channel and rule per hour; beyond it they are recorded"
        " as SUPPRESSED (the delivery history keeps them).",
    )
    create_time: datetime | None = Field(default=None, description="Output only.")
    update_time: datetime | None = Field(default=None, description="Output only.")


class ListAlertRulesResponse(Contract):
    """Rules, one page."""

    alert_rules: list[AlertRule] = Field(description="The rules.")
    next_page_token: str = Field(default="", description="Token of the next page.")


class NotificationKind(enum.StrEnum):
    """What a notification says."""

    OPENED = "OPENED"
    RESOLVED = "RESOLVED"
    TEST = "TEST"


class DeliveryState(enum.StrEnum):
    """Where a delivery stands."""

    PENDING = "PENDING"
    """Waiting for its first attempt (or for the event's analysis, a moment)."""
    RETRYING = "RETRYING"
    """An attempt failed; the next one is due at ``nextAttemptTime`` (backoff)."""
    DELIVERED = "DELIVERED"
    SUPPRESSED = "SUPPRESSED"
    """Over the rule's rate limit, or folded into a grouped notification."""
    DEAD = "DEAD"
    """Given up (attempts exhausted, or refused for good, e.g. HTTP 4xx): ``lastError`` says
    why."""


class TopCause(Contract):
    """The analysis's most probable cause, as a notification shows it."""

    analyzer: str = Field(description="The analyzer that found it, e.g. `host-cpu-contention`.")
    details: str = Field(description="What it found, in words.")
    evidence: list[str] = Field(default_factory=list, description="What it rests on.")


class NotifiedRun(Contract):
    """The run an event belongs to, as a notification shows it."""

    run_id: str = Field(description="The run id.")
    name: str = Field(default="", description="Its resource name.")
    display_name: str = Field(default="", description="Its display name.")
    run_set: str = Field(default="", description="Its run set.")
    labels: dict[str, str] = Field(default_factory=dict, description="Its labels.")


class Notification(Contract):
    """The body of a webhook delivery (other channels render the same facts)."""

    notification_id: uuid.UUID = Field(
        description="Stable per event, kind and channel: a receiver drops a repeat by it."
    )
    kind: NotificationKind = Field(description="Opened, resolved or a test.")
    summary: str = Field(description="One line for people, e.g. `OPEN · Step time up 180% …`.")
    event: WorkloadEvent | None = Field(default=None, description="The event (none for a test).")
    run: NotifiedRun | None = Field(default=None, description="Its run.")
    top_cause: TopCause | None = Field(
        default=None, description="The analysis's top cause, when one was found in time."
    )
    time_lost_seconds: float = Field(default=0.0, description="Time the run lost to it.")
    link: str = Field(default="", description="The event in the console.")
    grouped: list[WorkloadEvent] = Field(
        default_factory=list,
        description="Further events of the run folded into this notification (grouping).",
    )
    rule: str = Field(default="", description="The rule that routed it.")
    sent_time: datetime = Field(description="When this attempt was sent.")


class NotificationDelivery(Contract):
    """One notification to one channel, and how its delivery went."""

    name: str = Field(description="Resource name.")
    delivery_id: uuid.UUID = Field(description="Stable: event, kind, channel (and rule).")
    channel: str = Field(description="Channel id.")
    rule: str = Field(default="", description="Rule id (empty for a test send).")
    kind: NotificationKind = Field(description="What it says.")
    run_id: str = Field(default="", description="The event's run.")
    event_id: uuid.UUID | None = Field(default=None, description="The event.")
    state: DeliveryState = Field(description="Where it stands.")
    attempts: int = Field(default=0, ge=0, description="Attempts made.")
    last_error: str = Field(default="", description="Why the last attempt failed.")
    create_time: datetime = Field(description="When it was decided.")
    next_attempt_time: datetime | None = Field(default=None, description="When it is next tried.")
    deliver_time: datetime | None = Field(default=None, description="When it was delivered.")


class ListNotificationDeliveriesResponse(Contract):
    """Deliveries, newest first, one page (filter: `eventId`, `runId`, `channel`, `state`)."""

    notification_deliveries: list[NotificationDelivery] = Field(description="The deliveries.")
    next_page_token: str = Field(default="", description="Token of the next page.")


class TestChannelResponse(Contract):
    """The outcome of ``notificationChannels/{id}:test`` (a TEST notification, sent once,
    no retries)."""

    delivered: bool = Field(description="Whether the receiver accepted it.")
    error: str = Field(default="", description="Why not.")
    delivery: NotificationDelivery | None = Field(default=None, description="Its record.")


ChannelUpdateMask = Literal["displayName", "config", "secrets", "enabled"]
"""Fields a PATCH of a channel may change (``updateMask``)."""

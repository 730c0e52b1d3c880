"""The alerts API's logic: channels (secrets sealed on the way in, never out), rules (their
channels must exist), the delivery history and test sends. No SQL, no HTTP."""

import json
import re
import secrets as tokens
from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from pydantic import ValidationError

from mldiag_notifier.channels.email import TLS_MODES
from mldiag_notifier.crypto import SecretBox
from mldiag_notifier.dispatch import Dispatcher
from mldiag_notifier.errors import (
    ChannelExists,
    ChannelInUse,
    ChannelNotFound,
    InvalidResourceId,
    InvalidUpdateMask,
    RuleExists,
    RuleNotFound,
    UnknownChannel,
)
from mldiag_notifier.repository import (
    NotifierRepository,
    StoredChannel,
    channel_name,
    rule_name,
)
from mldiag_platform import resources
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.http import refuse_nul
from mldiag_platform.listing.filtering import FieldSpec, Kind, OrderKey, field_table, parse_filter
from mldiag_platform.listing.paging import keyset_position, keyset_token, page_size, query_digest
from mldiag_schemas.alerts import (
    RESOURCE_ID_PATTERN,
    AlertRule,
    ChannelKind,
    DeliveryState,
    ListAlertRulesResponse,
    ListNotificationChannelsResponse,
    ListNotificationDeliveriesResponse,
    NotificationChannel,
    NotificationKind,
    TestChannelResponse,
    check_channel_settings,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

_ID = re.compile(RESOURCE_ID_PATTERN)
_ID_RULE = "a lower-case letter, then lower-case letters, digits and '-', at most 63"
_NOT_ID = re.compile(r"[^a-z0-9]+")

CHANNEL_MASK = frozenset({"displayName", "config", "secrets", "enabled"})
"""What a channel's PATCH may change."""
RULE_MASK = frozenset(
    {
        "displayName",
        "enabled",
        "eventTypes",
        "minSeverity",
        "runSets",
        "labels",
        "channels",
        "notifyOnResolve",
        "groupWindowSeconds",
        "maxPerHour",
    }
)
"""What a rule's PATCH may change."""


def _enum(values: type[DeliveryState] | type[NotificationKind]) -> Any:
    def normalise(value: str) -> str | None:
        return value.upper() if value.upper() in values.__members__ else None

    return normalise


DELIVERY_FIELDS = field_table(
    (
        FieldSpec("event_id", Kind.STRING, ("eventId",)),
        FieldSpec("run_id", Kind.STRING, ("runId",)),
        FieldSpec("channel", Kind.STRING),
        FieldSpec("rule", Kind.STRING),
        FieldSpec("state", Kind.ENUM, normalise=_enum(DeliveryState)),
        FieldSpec("kind", Kind.ENUM, normalise=_enum(NotificationKind)),
        FieldSpec("create_time", Kind.TIMESTAMP, ("createTime",)),
    )
)
"""What the delivery list's ``filter`` may name."""
DELIVERY_ORDER = [OrderKey("create_time", descending=True), OrderKey("delivery_id", True)]
"""Newest first (the id breaks ties)."""
_BY_ID = [OrderKey("id", descending=False)]


def checked_id(value: str, field: str) -> str:
    """A channel's or rule's id, or ``invalid_resource_id`` naming ``field``."""
    return resources.checked_id(value, field, _ID, InvalidResourceId, _ID_RULE)


def derived_id(display_name: str, prefix: str) -> str:
    """An id made from a display name (``On-call Slack`` → ``on-call-slack``)."""
    slug = _NOT_ID.sub("-", display_name.lower()).strip("-")[:63].strip("-")
    if not slug or not slug[0].isalpha():
        slug = f"{prefix}-{slug}".strip("-")[:63].strip("-")
    return slug


def _chosen_id(param: str, body: str, display_name: str, prefix: str, field: str) -> str:
    if param and body and param != body:
        raise InvalidArgument(
            f"{field} {param!r} (query) and {body!r} (body) differ",
            details=[{"field": field, "problem": "given twice, differently"}],
        )
    return checked_id(param or body or derived_id(display_name, prefix), field)


def _mask(update_mask: str, body: dict[str, Any], allowed: frozenset[str]) -> list[str]:
    """The fields to change: ``updateMask``'s, or else every allowed field in the body."""
    fields = [field.strip() for field in update_mask.split(",") if field.strip()]
    if not fields:
        fields = [key for key in body if key in allowed]
    unknown = [field for field in fields if field not in allowed]
    if unknown or not fields:
        problem = f"may name {', '.join(sorted(allowed))}"
        raise InvalidUpdateMask(
            f"updateMask {update_mask!r}: {problem}",
            details=[{"field": "updateMask", "problem": problem}],
        )
    return fields


def _object(raw: bytes) -> dict[str, Any]:
    # PostgreSQL's jsonb cannot hold NUL: refused here, naming the field, never a 500 later
    refuse_nul(raw)
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise InvalidArgument("the body must be a JSON object")
    return body


def _invalid(model: str, exc: ValidationError | ValueError) -> InvalidArgument:
    if isinstance(exc, ValidationError):
        details = [
            {"field": ".".join(str(part) for part in error["loc"]), "problem": error["msg"]}
            for error in exc.errors()[:20]
        ]
        return InvalidArgument(f"the {model} is not valid", details=details)
    return InvalidArgument(str(exc), details=[{"field": "", "problem": str(exc)}])


_HTTP_URL = re.compile(r"^https?://[^\s/]+")


def check_values(kind: ChannelKind, config: dict[str, str], secrets: dict[str, str]) -> None:
    """What the contract's check leaves to the service: values a kind cannot use
    (``ValueError`` naming the key; never quoting a secret)."""
    slack_url = secrets.get("webhookUrl", "") if kind is ChannelKind.SLACK else ""
    if slack_url and not _HTTP_URL.match(slack_url):
        raise ValueError("secrets.webhookUrl: must be an http:// or https:// URL")
    if kind is ChannelKind.EMAIL:
        tls = config.get("tls", "")
        if tls and tls.lower() not in TLS_MODES:
            raise ValueError(f"config.tls: use {', '.join(TLS_MODES)}")
        port = config.get("smtpPort", "")
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError("config.smtpPort: must be a port number (1 to 65535)")
    if kind is ChannelKind.APPRISE and "urls" in secrets and not secrets["urls"].split():
        raise ValueError("secrets.urls: give at least one Apprise URL")


def _after(page_token: str) -> str | None:
    """The id a page of a list by id starts after (None for the first page)."""
    if not page_token:
        return None
    return str(keyset_position(page_token, _BY_ID, query_digest("", ""), ())[0])


def _id_page(found: list[T], size: int, id_of: Callable[[T], str]) -> tuple[list[T], str]:
    """A page of a list by id, from ``found`` (read one past ``size`` to learn whether
    another page follows), and the next page's token ("" on the last)."""
    page = found[:size]
    if len(found) <= size:
        return page, ""
    return page, keyset_token([id_of(page[-1])], query_digest("", ""))


def _channel_id(channel: NotificationChannel) -> str:
    return channel.channel_id


def _rule_id(rule: AlertRule) -> str:
    return rule.rule_id


class AlertsAdmin:
    """Channels, rules and deliveries of a project and location."""

    def __init__(
        self, repository: NotifierRepository, box: SecretBox, dispatcher: Dispatcher
    ) -> None:
        self._repository = repository
        self._box = box
        self._dispatcher = dispatcher

    # --- channels ---

    async def create_channel(
        self, project: str, location: str, channel: NotificationChannel, channel_id: str
    ) -> NotificationChannel:
        """Store a channel (a webhook without a signing secret gets one made)."""
        try:  # again in full: a body naming the channel (output only) skipped the check
            check_channel_settings(channel.kind, channel.config, channel.secrets, partial=False)
            check_values(channel.kind, channel.config, channel.secrets)
        except ValueError as exc:
            raise _invalid("channel", exc) from None
        chosen = _chosen_id(
            channel_id, channel.channel_id, channel.display_name, "channel", "channelId"
        )
        secrets = dict(channel.secrets)
        if channel.kind is ChannelKind.WEBHOOK and not secrets.get("signingSecret"):
            secrets["signingSecret"] = tokens.token_urlsafe(32)
        stored = await self._repository.insert_channel(
            project,
            location,
            channel.model_copy(update={"channel_id": chosen, "secrets": secrets}),
            self._box.seal(secrets),
        )
        if stored is None:
            name = channel_name(project, location, chosen)
            raise ChannelExists(f"{name} exists already", details=[{"resource": name}])
        log.info("notifier.channel.created", channel=chosen, kind=channel.kind.value)
        return stored.channel

    async def _stored_channel(self, project: str, location: str, channel_id: str) -> StoredChannel:
        stored = await self._repository.channel(
            project, location, checked_id(channel_id, "channelId")
        )
        if stored is None:
            name = channel_name(project, location, channel_id)
            raise ChannelNotFound(f"{name} not found", details=[{"resource": name}])
        return stored

    async def get_channel(
        self, project: str, location: str, channel_id: str
    ) -> NotificationChannel:
        """One channel (its secrets' names, never their values)."""
        return (await self._stored_channel(project, location, channel_id)).channel

    async def list_channels(
        self, project: str, location: str, requested_size: int | None, page_token: str
    ) -> ListNotificationChannelsResponse:
        """Channels by id, one page."""
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        found = await self._repository.channels(project, location, size + 1, _after(page_token))
        page, token = _id_page([stored.channel for stored in found], size, _channel_id)
        return ListNotificationChannelsResponse(notification_channels=page, next_page_token=token)

    async def update_channel(
        self, project: str, location: str, channel_id: str, raw: bytes, update_mask: str
    ) -> NotificationChannel:
        """Change the masked fields; ``secrets`` merge (a key set to "" is removed)."""
        body = _object(raw)
        fields = _mask(update_mask, body, CHANNEL_MASK)
        stored = await self._stored_channel(project, location, channel_id)
        current = stored.channel
        secrets = self._box.open(stored.sealed)
        document: dict[str, Any] = {
            "displayName": current.display_name,
            "kind": current.kind.value,
            "config": dict(current.config),
            "enabled": current.enabled,
        }
        for field in fields:
            if field == "secrets":
                given = body.get("secrets") or {}
                if not isinstance(given, dict):
                    raise InvalidArgument("secrets must be an object of strings")
                secrets.update(given)
                secrets = {key: value for key, value in secrets.items() if value != ""}
            else:
                document[field] = body.get(field)
        try:
            changed = NotificationChannel.model_validate({**document, "secrets": secrets})
            check_values(changed.kind, changed.config, secrets)
        except (ValidationError, ValueError) as exc:
            raise _invalid("channel", exc) from None
        if changed.kind is ChannelKind.WEBHOOK and not secrets.get("signingSecret"):
            secrets["signingSecret"] = tokens.token_urlsafe(32)
        updated = await self._repository.update_channel(
            project,
            location,
            changed.model_copy(
                update={"channel_id": current.channel_id, "secret_keys": sorted(secrets)}
            ),
            self._box.seal(secrets),
        )
        if updated is None:
            raise ChannelNotFound(f"{current.name} not found", details=[{"resource": current.name}])
        log.info("notifier.channel.updated", channel=current.channel_id, fields=fields)
        return updated.channel

    async def delete_channel(self, project: str, location: str, channel_id: str) -> None:
        """Delete a channel no rule names."""
        deleted, users = await self._repository.delete_channel(
            project, location, checked_id(channel_id, "channelId")
        )
        name = channel_name(project, location, channel_id)
        if users:
            raise ChannelInUse(
                f"{name} is named by alert rules {', '.join(users)}: change them first",
                details=[{"resource": name, "rules": users}],
            )
        if not deleted:
            raise ChannelNotFound(f"{name} not found", details=[{"resource": name}])
        log.info("notifier.channel.deleted", channel=channel_id)

    async def test_channel(
        self, project: str, location: str, channel_id: str
    ) -> TestChannelResponse:
        """Send one TEST notification through the channel, no retries."""
        stored = await self._stored_channel(project, location, channel_id)
        return await self._dispatcher.send_test(project, location, stored)

    # --- rules ---

    async def _known_channels(self, rule: AlertRule) -> AlertRule:
        """The rule with its channels as ids (a full channel name is cut to its id)."""
        ids = [channel.rsplit("/", 1)[-1] for channel in rule.channels]
        for channel in ids:
            checked_id(channel, "channels")
        return rule.model_copy(update={"channels": list(dict.fromkeys(ids))})

    @staticmethod
    def _missing(project: str, location: str, missing: list[str]) -> UnknownChannel:
        names = [channel_name(project, location, channel) for channel in missing]
        return UnknownChannel(
            f"no such notification channels: {', '.join(names)}",
            details=[{"field": "channels", "problem": f"{name} not found"} for name in names],
        )

    async def create_rule(
        self, project: str, location: str, rule: AlertRule, rule_id: str
    ) -> AlertRule:
        """Store a rule whose channels all exist."""
        chosen = _chosen_id(rule_id, rule.rule_id, rule.display_name, "rule", "ruleId")
        rule = await self._known_channels(rule.model_copy(update={"rule_id": chosen}))
        created, missing = await self._repository.insert_rule(project, location, rule)
        if missing:
            raise self._missing(project, location, missing)
        if created is None:
            name = rule_name(project, location, chosen)
            raise RuleExists(f"{name} exists already", details=[{"resource": name}])
        log.info("notifier.rule.created", rule=chosen)
        return created

    async def get_rule(self, project: str, location: str, rule_id: str) -> AlertRule:
        """One rule."""
        rule = await self._repository.rule(project, location, checked_id(rule_id, "ruleId"))
        if rule is None:
            name = rule_name(project, location, rule_id)
            raise RuleNotFound(f"{name} not found", details=[{"resource": name}])
        return rule

    async def list_rules(
        self, project: str, location: str, requested_size: int | None, page_token: str
    ) -> ListAlertRulesResponse:
        """Rules by id, one page."""
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        found = await self._repository.rules(project, location, size + 1, _after(page_token))
        page, token = _id_page(found, size, _rule_id)
        return ListAlertRulesResponse(alert_rules=page, next_page_token=token)

    async def update_rule(
        self, project: str, location: str, rule_id: str, raw: bytes, update_mask: str
    ) -> AlertRule:
        """Change the masked fields (channels must exist)."""
        body = _object(raw)
        fields = _mask(update_mask, body, RULE_MASK)
        current = await self.get_rule(project, location, rule_id)
        document = current.model_dump(
            mode="json", by_alias=True, exclude={"name", "create_time", "update_time"}
        )
        document.update({field: body.get(field) for field in fields})
        try:
            changed = AlertRule.model_validate(document)
        except ValidationError as exc:
            raise _invalid("rule", exc) from None
        changed = await self._known_channels(changed)
        updated, missing = await self._repository.update_rule(project, location, changed)
        if missing:
            raise self._missing(project, location, missing)
        if updated is None:
            raise RuleNotFound(f"{current.name} not found", details=[{"resource": current.name}])
        log.info("notifier.rule.updated", rule=current.rule_id, fields=fields)
        return updated

    async def delete_rule(self, project: str, location: str, rule_id: str) -> None:
        """Delete a rule (its deliveries stay in the history)."""
        if not await self._repository.delete_rule(project, location, checked_id(rule_id, "ruleId")):
            name = rule_name(project, location, rule_id)
            raise RuleNotFound(f"{name} not found", details=[{"resource": name}])
        log.info("notifier.rule.deleted", rule=rule_id)

    # --- deliveries ---

    async def list_deliveries(
        self,
        project: str,
        location: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str,
    ) -> ListNotificationDeliveriesResponse:
        """Deliveries newest first, filtered (``eventId="…"``, ``runId``, ``channel``,
        ``rule``, ``state``, ``kind``, ``createTime``; AND, OR, NOT), one page."""
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        where = parse_filter(filter_text, DELIVERY_FIELDS)
        digest = query_digest(filter_text, "")
        after = (
            keyset_position(page_token, DELIVERY_ORDER, digest, {"create_time"})
            if page_token
            else None
        )
        found = await self._repository.list_deliveries(
            project, location, where, DELIVERY_ORDER, after, size + 1
        )
        page = found[:size]
        token = ""
        if len(found) > size:
            last = page[-1]
            token = keyset_token([last.create_time, str(last.delivery_id)], digest)
        return ListNotificationDeliveriesResponse(
            notification_deliveries=page, next_page_token=token
        )

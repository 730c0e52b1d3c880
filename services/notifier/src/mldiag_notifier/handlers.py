"""The notifier's edges: its bus consumers and its HTTP routes (the only module that
knows about either)."""

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Annotated, Any, cast

import structlog
from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel

from mldiag_notifier.admin import AlertsAdmin
from mldiag_notifier.errors import InvalidResourceId
from mldiag_notifier.service import RoutingService
from mldiag_platform import resources
from mldiag_platform.bus import Bus, ConsumerSpec, Delivery
from mldiag_platform.http import (
    EMPTY_OBJECT,
    ContractResponse,
    page_size_param,
    parse_body,
    query_param,
)
from mldiag_platform.resources import ParentDep
from mldiag_schemas import bus
from mldiag_schemas.alerts import (
    RESOURCE_ID_PATTERN,
    AlertRule,
    ListAlertRulesResponse,
    ListNotificationChannelsResponse,
    ListNotificationDeliveriesResponse,
    NotificationChannel,
    TestChannelResponse,
)
from mldiag_schemas.analyses import AnalysisCompleted
from mldiag_schemas.auth import Permission
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import WorkloadEventOpened, WorkloadEventResolved
from mldiag_schemas.runs import RunCreated, RunDeleted, RunPhaseChanged, RunUpdated

# --- bus ---

EVENTS_CONSUMER = ConsumerSpec(
    stream=bus.EVENTS,
    subject=bus.WORKLOAD_EVENTS + ".*.*",  # opened and resolved (updates are not notified)
    durable=bus.NOTIFIER_EVENTS_DURABLE,
    message_type=Envelope,
    batch_size=50,
    max_wait_seconds=0.05,
)
ANALYSES_CONSUMER = ConsumerSpec(
    stream=bus.ANALYSES,
    subject=bus.ANALYSIS_COMPLETED + ".*",
    durable=bus.NOTIFIER_ANALYSES_DURABLE,
    message_type=AnalysisCompleted,
    batch_size=50,
    max_wait_seconds=0.05,
)
RUNS_CONSUMER = ConsumerSpec(
    stream=bus.RUNS,
    subject=bus.RUN_CREATED.rpartition(".")[0] + ".>",  # runs.run.*: created … deleted
    durable=bus.NOTIFIER_RUNS_DURABLE,
    message_type=Envelope,
    batch_size=100,
    max_wait_seconds=0.05,
)


def _bound(delivery: Delivery[Any]) -> AbstractContextManager[None]:
    """The delivery's subject on every log line written while it is handled (the service
    adds the run and the event)."""
    return structlog.contextvars.bound_contextvars(subject=delivery.subject)


class BusHandlers:
    """The notifier's batch handlers, bound to its routing service."""

    def __init__(self, service: RoutingService) -> None:
        self._service = service

    async def on_events(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Route opened and resolved events, in order."""
        for delivery in deliveries:
            message = delivery.message
            with _bound(delivery):
                if isinstance(message, WorkloadEventOpened):
                    await self._service.on_opened(message.event)
                elif isinstance(message, WorkloadEventResolved):
                    await self._service.on_resolved(message.event)

    async def on_analyses(self, deliveries: list[Delivery[AnalysisCompleted]]) -> None:
        """Keep each analysis's top cause."""
        for delivery in deliveries:
            with _bound(delivery):
                await self._service.on_analysis(delivery.message.analysis)

    async def on_runs(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Keep the runs read model."""
        for delivery in deliveries:
            message = delivery.message
            if isinstance(message, RunCreated | RunUpdated | RunPhaseChanged | RunDeleted):
                with _bound(delivery):
                    await self._service.on_run(message.run, deleted=isinstance(message, RunDeleted))


def register(connection: Bus, service: RoutingService) -> None:
    """Add the notifier's consumers to the bus."""
    handlers = BusHandlers(service)
    connection.consume(RUNS_CONSUMER, handlers.on_runs)
    connection.consume(EVENTS_CONSUMER, handlers.on_events)
    connection.consume(ANALYSES_CONSUMER, handlers.on_analyses)


# --- HTTP ---

router = APIRouter()


def _admin(request: Request) -> AlertsAdmin:
    return cast(AlertsAdmin, request.app.state.admin)


AdminDep = Annotated[AlertsAdmin, Depends(_admin)]
ChannelId = Annotated[
    str, resources.id_path("The channel's id (checked by the service).", RESOURCE_ID_PATTERN)
]
RuleId = Annotated[
    str, resources.id_path("The rule's id (checked by the service).", RESOURCE_ID_PATTERN)
]


def _route(
    method: str,
    path: str,
    permission: Permission,
    body: type[BaseModel] | None = None,
    response: type[BaseModel] | None = None,
    responses: dict[int | str, dict[str, Any]] | None = None,
) -> Callable[[Any], Any]:
    return resources.route(
        router,
        method,
        path,
        permission,
        body=body or (),
        response=response,
        responses=responses,
        id_error=InvalidResourceId,
    )


def _page_token(request: Request) -> str:
    return query_param(request, "pageToken", "page_token") or ""


def _empty() -> Response:
    return Response(b"{}", media_type="application/json")


_CHANNELS = "/notificationChannels"
_CHANNEL = _CHANNELS + "/{channel_id}"
_RULES = "/alertRules"
_RULE = _RULES + "/{rule_id}"


@_route("POST", _CHANNELS, Permission.CHANNELS_CREATE, NotificationChannel, NotificationChannel)
async def create_channel(request: Request, parent: ParentDep, admin: AdminDep) -> Response:
    """Create a channel (``?channelId=``, else its body's ``channelId``, else one made from
    its display name). Secrets are stored encrypted and never returned."""
    channel = parse_body(NotificationChannel, await request.body())
    channel_id = query_param(request, "channelId", "channel_id") or ""
    created = await admin.create_channel(parent.project, parent.location, channel, channel_id)
    return ContractResponse(created)


@_route("GET", _CHANNELS, Permission.CHANNELS_LIST, response=ListNotificationChannelsResponse)
async def list_channels(request: Request, parent: ParentDep, admin: AdminDep) -> Response:
    """Channels by id, one page (``pageSize``, ``pageToken``)."""
    page = await admin.list_channels(
        parent.project, parent.location, page_size_param(request), _page_token(request)
    )
    return ContractResponse(page)


@_route("POST", _CHANNEL + ":test", Permission.CHANNELS_TEST, response=TestChannelResponse)
async def test_channel(channel_id: ChannelId, parent: ParentDep, admin: AdminDep) -> Response:
    """Send one TEST notification through the channel (no retries); answers the outcome,
    recorded in the delivery history too."""
    return ContractResponse(await admin.test_channel(parent.project, parent.location, channel_id))


@_route("GET", _CHANNEL, Permission.CHANNELS_GET, response=NotificationChannel)
async def get_channel(channel_id: ChannelId, parent: ParentDep, admin: AdminDep) -> Response:
    """One channel (``secretKeys`` names its secrets; their values are never returned)."""
    return ContractResponse(await admin.get_channel(parent.project, parent.location, channel_id))


@_route("PATCH", _CHANNEL, Permission.CHANNELS_UPDATE, NotificationChannel, NotificationChannel)
async def update_channel(
    request: Request, channel_id: ChannelId, parent: ParentDep, admin: AdminDep
) -> Response:
    """Change ``updateMask``'s fields (displayName, config, secrets, enabled; all given
    when absent). ``secrets`` merge into the stored ones; a key set to "" is removed."""
    changed = await admin.update_channel(
        parent.project,
        parent.location,
        channel_id,
        await request.body(),
        query_param(request, "updateMask", "update_mask") or "",
    )
    return ContractResponse(changed)


@_route("DELETE", _CHANNEL, Permission.CHANNELS_DELETE, responses=EMPTY_OBJECT)
async def delete_channel(channel_id: ChannelId, parent: ParentDep, admin: AdminDep) -> Response:
    """Delete a channel; refused (409 ``channel_in_use``) while rules name it."""
    await admin.delete_channel(parent.project, parent.location, channel_id)
    return _empty()


@_route("POST", _RULES, Permission.ALERT_RULES_CREATE, AlertRule, AlertRule)
async def create_rule(request: Request, parent: ParentDep, admin: AdminDep) -> Response:
    """Create a rule (``?ruleId=``); every channel it names must exist (400 otherwise)."""
    rule = parse_body(AlertRule, await request.body())
    rule_id = query_param(request, "ruleId", "rule_id") or ""
    created = await admin.create_rule(parent.project, parent.location, rule, rule_id)
    return ContractResponse(created)


@_route("GET", _RULES, Permission.ALERT_RULES_LIST, response=ListAlertRulesResponse)
async def list_rules(request: Request, parent: ParentDep, admin: AdminDep) -> Response:
    """Rules by id, one page (``pageSize``, ``pageToken``)."""
    page = await admin.list_rules(
        parent.project, parent.location, page_size_param(request), _page_token(request)
    )
    return ContractResponse(page)


@_route("GET", _RULE, Permission.ALERT_RULES_GET, response=AlertRule)
async def get_rule(rule_id: RuleId, parent: ParentDep, admin: AdminDep) -> Response:
    """One rule."""
    return ContractResponse(await admin.get_rule(parent.project, parent.location, rule_id))


@_route("PATCH", _RULE, Permission.ALERT_RULES_UPDATE, AlertRule, AlertRule)
async def update_rule(
    request: Request, rule_id: RuleId, parent: ParentDep, admin: AdminDep
) -> Response:
    """Change ``updateMask``'s fields (all given when absent); channels must exist."""
    changed = await admin.update_rule(
        parent.project,
        parent.location,
        rule_id,
        await request.body(),
        query_param(request, "updateMask", "update_mask") or "",
    )
    return ContractResponse(changed)


@_route("DELETE", _RULE, Permission.ALERT_RULES_DELETE, responses=EMPTY_OBJECT)
async def delete_rule(rule_id: RuleId, parent: ParentDep, admin: AdminDep) -> Response:
    """Delete a rule (its deliveries stay in the history)."""
    await admin.delete_rule(parent.project, parent.location, rule_id)
    return _empty()


@_route(
    "GET",
    "/notificationDeliveries",
    Permission.DELIVERIES_LIST,
    response=ListNotificationDeliveriesResponse,
)
async def list_deliveries(request: Request, parent: ParentDep, admin: AdminDep) -> Response:
    """The delivery history, newest first; ``filter``: ``eventId="…"``, ``runId="…"``,
    ``channel="…"``, ``rule="…"``, ``state="DEAD"``, ``kind="OPENED"`` (AND, OR, NOT)."""
    page = await admin.list_deliveries(
        parent.project,
        parent.location,
        page_size_param(request),
        _page_token(request),
        request.query_params.get("filter", ""),
    )
    return ContractResponse(page)

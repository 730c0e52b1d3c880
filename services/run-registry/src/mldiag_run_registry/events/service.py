"""Workload events and analyses of runs: recording them, and serving events with their
latest analysis merged in (no SQL here).

An event as served carries its resource name
(``projects/{p}/locations/{l}/machineLearningRuns/{r}/monitoredEvents/{id}``) and, once an
analysis exists, ``analyzerInsightFound``, the ranked ``analyzerReports`` and the larger of
the detector's and the analysis's ``timeLostSeconds``.
"""

import enum
import hashlib
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

import structlog

from mldiag_platform.errors import InvalidPageToken
from mldiag_platform.listing.filtering import FieldSpec, Kind, field_table, parse_filter
from mldiag_platform.listing.paging import (
    decode_token,
    encode_token,
    page_size,
    token_text,
    token_time,
)
from mldiag_run_registry.events.errors import EventNotFound
from mldiag_run_registry.events.repository import EventsRepository, StoredEvent
from mldiag_run_registry.lookup import RunLookup
from mldiag_schemas.analyses import Analysis
from mldiag_schemas.events import EventState, EventType, ListEventsResponse, Severity, WorkloadEvent
from mldiag_schemas.ids import run_name

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_RUN_EVENTS = 10_000


def _one_of(values: type[enum.StrEnum]) -> Callable[[str], str | None]:
    allowed = {member.value for member in values}

    def normalise(raw: str) -> str | None:
        return raw.upper() if raw.upper() in allowed else None

    return normalise


FIELDS = field_table(
    (
        FieldSpec("type", Kind.ENUM, normalise=_one_of(EventType)),
        FieldSpec("state", Kind.ENUM, normalise=_one_of(EventState)),
        FieldSpec("severity", Kind.ENUM, normalise=_one_of(Severity)),
        FieldSpec("run", Kind.STRING, aliases=("runId", "run_id")),
        FieldSpec("startTime", Kind.TIMESTAMP, aliases=("start_time",)),
        FieldSpec("endTime", Kind.TIMESTAMP, aliases=("end_time",)),
    )
)
"""What an events filter may name: ``type``, ``state``, ``severity`` (=, !=), ``run`` (a run
id or name), ``startTime`` and ``endTime`` (quoted RFC 3339, with < <= > >=)."""


def event_name(project: str, location: str, event: WorkloadEvent) -> str:
    """The resource name of an event."""
    return f"{run_name(project, location, event.run_id)}/monitoredEvents/{event.event_id}"


def served(stored: StoredEvent) -> WorkloadEvent:
    """The event as the API serves it: named, with its latest analysis merged in."""
    changes: dict[str, object] = {"name": event_name(stored.project, stored.location, stored.event)}
    analysis = stored.analysis
    if analysis is not None:
        changes.update(
            analyzer_insight_found=analysis.analyzer_insight_found,
            analyzer_reports=analysis.reports,
            time_lost_seconds=max(stored.event.time_lost_seconds, analysis.time_lost_seconds),
        )
    return stored.event.model_copy(update=changes)


def latest_revisions(events: Sequence[WorkloadEvent]) -> list[WorkloadEvent]:
    """One revision per event id: the highest (RESOLVED wins a tie), in first-seen order."""
    latest: dict[uuid.UUID, WorkloadEvent] = {}
    for event in events:
        seen = latest.get(event.event_id)
        if seen is None or (event.revision, event.state is EventState.RESOLVED) > (
            seen.revision,
            seen.state is EventState.RESOLVED,
        ):
            latest[event.event_id] = event
    return list(latest.values())


class EventsService:
    """Records what the detector and analyzer publish; serves events per run and parent."""

    def __init__(self, repository: EventsRepository, runs: RunLookup) -> None:
        self._repository = repository
        self._runs = runs

    async def store_events(self, events: Sequence[WorkloadEvent]) -> int:
        """Record event revisions; older or repeated revisions change nothing."""
        changed = await self._repository.store_events(latest_revisions(events))
        log.info("events.stored", received=len(events), changed=changed)
        return changed

    async def store_analyses(self, analyses: Sequence[Analysis]) -> int:
        """Record analyses (idempotent); they may arrive before their event."""
        return await self._repository.store_analyses(analyses)

    async def list_events(
        self,
        project: str,
        location: str,
        run_id: str | None = None,
        *,
        filter_text: str = "",
        requested_size: int | None = None,
        page_token: str = "",
    ) -> ListEventsResponse:
        """A page of the events of a run (or of every live run under the parent), newest
        first, matching ``filter_text``."""
        if run_id is not None:
            await self._runs.get_run(project, location, run_id)
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        where = parse_filter(filter_text, FIELDS)
        query = hashlib.sha256(f"{run_id or ''}\0{filter_text}".encode()).hexdigest()[:16]
        after = _position(page_token, query) if page_token else None
        rows = await self._repository.list_events(project, location, run_id, where, size + 1, after)
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            last = rows[-1].event
            token = encode_token(
                {"k": [last.start_time.isoformat(), str(last.event_id)], "q": query}
            )
        return ListEventsResponse(events=[served(row) for row in rows], next_page_token=token)

    async def get_event(
        self, project: str, location: str, run_id: str, event_id: str
    ) -> WorkloadEvent:
        """One event of a run, or :class:`EventNotFound`."""
        await self._runs.get_run(project, location, run_id)
        name = f"{run_name(project, location, run_id)}/monitoredEvents/{event_id}"
        try:
            parsed = uuid.UUID(event_id)
        except ValueError:
            raise EventNotFound(f"event {name!r} not found (event ids are UUIDs)") from None
        stored = await self._repository.get_event(project, location, run_id, parsed)
        if stored is None:
            raise EventNotFound(f"event {name!r} not found")
        return served(stored)

    async def run_events(self, project: str, location: str, run_id: str) -> list[WorkloadEvent]:
        """Every event of a run as served, oldest first (a run has few: the detector opens
        one per signal, not per point)."""
        rows = await self._repository.list_events(
            project, location, run_id, None, MAX_RUN_EVENTS, None
        )
        return [served(row) for row in reversed(rows)]

    async def list_analyses(self, project: str, location: str, run_id: str) -> list[Analysis]:
        """A run's analyses, oldest first."""
        await self._runs.get_run(project, location, run_id)
        return await self._repository.list_analyses(run_id)


def _position(token: str, query: str) -> tuple[datetime, uuid.UUID]:
    fields = decode_token(token)
    values = fields.get("k")
    if fields.get("q") != query or not isinstance(values, list) or len(values) != 2:
        raise InvalidPageToken("the page token is not valid for this run and filter")
    try:
        event_id = uuid.UUID(token_text(values[1]))
    except ValueError:
        raise InvalidPageToken("the page token is not valid") from None
    return token_time(values[0]), event_id

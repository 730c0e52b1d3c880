"""The live feed: one set of core NATS subscriptions per registry process, fanned out to
every open browser stream.

Hints come from two places, both after a commit, so a refetch always sees the change:
the registry's own announcements once it stored metrics, events, analyses or sessions
(``console.updated.<run>``), and the run facts its outbox publishes (``runs.run.*.<run>``).
Every replica hears every hint, whichever stored the data.
"""

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import structlog
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from mldiag_platform.bus import Bus
from mldiag_schemas import bus as subjects
from mldiag_schemas.sharing import RunUpdate, RunUpdateKind

log = structlog.get_logger(__name__)

LISTENER_BACKLOG = 256
"""Hints a slow browser may fall behind by; past that they are dropped and the stream tells
it to refetch everything once it has caught up."""


@dataclass(eq=False)  # one per stream, kept in a set by identity
class Listener:
    """One open stream: the hints waiting for it, and whether some had to be dropped."""

    run_id: str | None
    queue: asyncio.Queue[RunUpdate] = field(default_factory=lambda: asyncio.Queue(LISTENER_BACKLOG))
    missed: bool = False

    def offer(self, update: RunUpdate) -> None:
        """Queue a hint this stream wants, or remember that one was dropped."""
        wanted = update.run_id == self.run_id if self.run_id else update.kind is RunUpdateKind.RUN
        if not wanted:
            return
        if self.queue.full():
            self.missed = True
        else:
            self.queue.put_nowait(update)

    def caught_up_after_missing(self) -> bool:
        """True once, when every queued hint was sent after some were dropped."""
        if self.missed and self.queue.empty():
            self.missed = False
            return True
        return False


class LiveFeed:
    """Who listens to which run, and the subscriptions that feed them."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._listeners: set[Listener] = set()
        self._subscriptions: list[Subscription] = []

    async def start(self) -> None:
        """Subscribe to every hint."""
        self._subscriptions = [
            await self._bus.listen(subjects.CONSOLE_UPDATED + ".*", self._on_update),
            await self._bus.listen("runs.run.*.*", self._on_run_fact),
            await self._bus.listen(subjects.PROFILER_SESSION_CHANGED + ".*", self._on_session),
        ]

    async def stop(self) -> None:
        """Unsubscribe."""
        for subscription in self._subscriptions:
            with suppress(Exception):
                await subscription.unsubscribe()
        self._subscriptions = []

    async def announce(
        self,
        run_ids: Sequence[str],
        kind: RunUpdateKind,
        metrics: dict[str, set[str]] | None = None,
    ) -> None:
        """Tell every replica's listeners that runs changed (after the change is committed).

        A hint that cannot be published is logged and dropped: the data is stored, and
        pages refetch when their stream reconnects.
        """
        for run_id in dict.fromkeys(run_ids):
            names = sorted((metrics or {}).get(run_id, ()))
            update = RunUpdate(run_id=run_id, kind=kind, metrics=names)
            try:
                await self._bus.notify(subjects.CONSOLE_UPDATED, run_id, update)
            except Exception:  # a lost hint must never fail the store that preceded it
                log.warning("live.announce_failed", run_id=run_id, kind=kind.value, exc_info=True)

    @contextmanager
    def listening(self, run_id: str | None) -> Iterator[Listener]:
        """A listener to the hints about ``run_id`` (every run's ``run`` hints when None)."""
        listener = Listener(run_id)
        self._listeners.add(listener)
        try:
            yield listener
        finally:
            self._listeners.discard(listener)

    @property
    def listeners(self) -> int:
        """How many streams are open (for tests and the log)."""
        return len(self._listeners)

    def _dispatch(self, update: RunUpdate) -> None:
        for listener in self._listeners:
            listener.offer(update)

    async def _on_update(self, _subject: str, payload: bytes) -> None:
        try:
            self._dispatch(RunUpdate.model_validate_json(payload))
        except ValidationError:
            log.warning("live.hint_unreadable", payload=payload[:200].decode(errors="replace"))

    async def _on_run_fact(self, subject: str, _payload: bytes) -> None:
        self._dispatch(RunUpdate(run_id=subject.rsplit(".", 1)[-1], kind=RunUpdateKind.RUN))

    async def _on_session(self, subject: str, _payload: bytes) -> None:
        self._dispatch(RunUpdate(run_id=subject.rsplit(".", 1)[-1], kind=RunUpdateKind.PROFILES))

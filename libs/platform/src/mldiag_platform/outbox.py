"""Publish after commit: messages are written to an outbox table in the transaction that
changes the data, and published (then deleted) once the transaction has committed.

If the process dies between commit and publish, the rows stay and the next flush (the
periodic sweep, or the next unit of work) publishes them. ``Nats-Msg-Id`` = ``event_id``
makes a repeated publish harmless.

A flush never fails the unit of work that called it: its data is committed, and what could
not be published now is published by a later sweep. One bad row never blocks the others: a
row that fails while others are published waits its own backoff, and a row that can never
be published (an invalid subject) is parked with its reason and skipped.
"""

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Protocol

import asyncpg
import structlog
from prometheus_client import Counter

from mldiag_platform.bus import Publisher
from mldiag_platform.database import Migration, load_migrations
from mldiag_platform.errors import InvalidArgument
from mldiag_platform.periodic import periodically
from mldiag_schemas.envelope import Envelope

log = structlog.get_logger(__name__)

OUTBOX_PARKED = Counter(
    "mldiag_outbox_parked_total", "Outbox rows parked because they can never be published."
)

MAX_ROW_BACKOFF = timedelta(seconds=60)
"""Longest wait between two attempts at a row that keeps failing while others go out."""


def outbox_migrations() -> list[Migration]:
    """The outbox table, for services that publish what they commit."""
    return load_migrations("outbox", "mldiag_platform.migrations.outbox")


class Flusher(Protocol):
    """What domain code needs from the outbox: publish what committed transactions staged."""

    async def flush(self) -> int:
        """Publish staged messages; return how many."""
        ...


class Outbox:
    """Stage messages inside a transaction; publish them after it commits."""

    def __init__(self, pool: asyncpg.Pool, publisher: Publisher, batch_size: int = 500) -> None:
        self._pool = pool
        self._publisher = publisher
        self._batch_size = batch_size
        self._flush_lock = asyncio.Lock()

    async def add(self, conn: asyncpg.Connection, messages: Sequence[Envelope]) -> None:
        """Stage ``messages`` on ``conn``, which must be inside the caller's transaction."""
        if not messages:
            return
        await conn.executemany(
            "INSERT INTO outbox (event_id, subject, payload) VALUES ($1, $2, $3)"
            " ON CONFLICT (event_id) DO NOTHING",
            [
                (m.event_id, self._publisher.subject_for(m), m.model_dump_json().encode())
                for m in messages
            ],
        )

    async def flush(self) -> int:
        """Publish every staged message that is due, oldest first; return how many were.

        Never raises for a publish or database failure: the rows stay for the next sweep.
        """
        try:
            return await self._flush()
        except Exception as exc:  # noqa: BLE001  # committed already; the sweep retries
            log.warning("outbox.flush.deferred", error=repr(exc))
            return 0

    async def _flush(self) -> int:
        published = 0
        async with self._flush_lock:
            while True:
                rows = await self._pool.fetch(
                    "SELECT event_id, subject, payload, attempts FROM outbox"
                    " WHERE parked_reason IS NULL AND next_attempt_at <= now()"
                    " ORDER BY created_at LIMIT $1",
                    self._batch_size,
                )
                if not rows:
                    return published
                results = await asyncio.gather(
                    *(
                        self._publisher.publish_raw(
                            row["subject"], bytes(row["payload"]), str(row["event_id"])
                        )
                        for row in rows
                    ),
                    return_exceptions=True,
                )
                sent = [
                    row["event_id"]
                    for row, result in zip(rows, results, strict=True)
                    if result is None
                ]
                failed = [
                    (row, result)
                    for row, result in zip(rows, results, strict=True)
                    if isinstance(result, BaseException)
                ]
                if sent:
                    await self._pool.execute(
                        "DELETE FROM outbox WHERE event_id = ANY($1::uuid[])", sent
                    )
                    published += len(sent)
                await self._set_aside(failed, outage=not sent)
                if not sent:
                    return published

    async def _set_aside(
        self, failed: list[tuple[asyncpg.Record, BaseException]], *, outage: bool
    ) -> None:
        """Park what can never go out; give the rest a backoff of their own, unless nothing
        went out at all (an outage, not a bad row: they are all retried at the next sweep)."""
        for row, error in failed:
            if isinstance(error, asyncio.CancelledError):
                raise error
            if isinstance(error, InvalidArgument):
                await self._pool.execute(
                    "UPDATE outbox SET parked_reason = $2 WHERE event_id = $1",
                    row["event_id"],
                    error.message[:1000],
                )
                OUTBOX_PARKED.inc()
                log.error(
                    "outbox.row.parked",
                    event_id=str(row["event_id"]),
                    subject=row["subject"][:200],
                    reason=error.message,
                )
            elif not outage:
                backoff = min(timedelta(seconds=2 ** row["attempts"]), MAX_ROW_BACKOFF)
                await self._pool.execute(
                    "UPDATE outbox SET attempts = attempts + 1, last_error = $2,"
                    " next_attempt_at = now() + $3 WHERE event_id = $1",
                    row["event_id"],
                    repr(error)[:1000],
                    backoff,
                )
                log.warning(
                    "outbox.row.retry_later",
                    event_id=str(row["event_id"]),
                    attempt=row["attempts"] + 1,
                    error=repr(error),
                )
        if outage and failed:
            raise failed[0][1]

    async def sweep(self) -> None:
        """Flush once, logging what a sweep published (rows a crash or an outage left)."""
        count = await self.flush()
        if count:
            log.info("outbox.sweep.published", count=count)


def running_sweeper(
    outbox: Outbox, interval_seconds: float = 2.0
) -> contextlib.AbstractAsyncContextManager[asyncio.Task[None]]:
    """Sweep the outbox every ``interval_seconds`` for the lifetime of the context, so rows
    left by a crash or an outage are not stranded (through outages too)."""
    return periodically(
        outbox.sweep, interval_seconds, name="outbox-sweeper", failed="outbox.sweep.failed"
    )

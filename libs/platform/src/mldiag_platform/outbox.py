"""Publish after commit: messages are written to an outbox table in the transaction that
changes the data, and published (then deleted) once the transaction has committed.

If the process dies between commit and publish, the rows stay and the next flush (the
periodic sweep, or the next unit of work) publishes them. ``Nats-Msg-Id`` = ``event_id``
makes a repeated publish harmless.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import asyncpg
import structlog

from mldiag_platform.bus import Publisher
from mldiag_platform.database import Migration, load_migrations
from mldiag_schemas.envelope import Envelope

log = structlog.get_logger(__name__)


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
        """Publish every staged message, oldest first; return how many were published."""
        published = 0
        async with self._flush_lock:
            while True:
                rows = await self._pool.fetch(
                    "SELECT event_id, subject, payload FROM outbox ORDER BY created_at LIMIT $1",
                    self._batch_size,
                )
                if not rows:
                    return published
                await asyncio.gather(
                    *(
                        self._publisher.publish_raw(
                            row["subject"], bytes(row["payload"]), str(row["event_id"])
                        )
                        for row in rows
                    )
                )
                await self._pool.execute(
                    "DELETE FROM outbox WHERE event_id = ANY($1::uuid[])",
                    [row["event_id"] for row in rows],
                )
                published += len(rows)

    async def sweep_forever(self, interval_seconds: float = 2.0) -> None:
        """Flush periodically, so rows left by a crash or an outage are not stranded."""
        while True:
            await asyncio.sleep(interval_seconds)
            try:
                count = await self.flush()
            except Exception as exc:  # noqa: BLE001  # keep sweeping through outages
                log.warning("outbox.sweep.failed", error=repr(exc))
            else:
                if count:
                    log.info("outbox.sweep.published", count=count)


@contextlib.asynccontextmanager
async def running_sweeper(
    outbox: Outbox, interval_seconds: float = 2.0
) -> AsyncIterator[asyncio.Task[None]]:
    """Run :meth:`Outbox.sweep_forever` for the lifetime of the context."""
    task = asyncio.create_task(outbox.sweep_forever(interval_seconds))
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

"""What every table of the notifier shares: the pool, and the lock that serialises what is
decided about one event."""

import uuid

import asyncpg


class Table:
    """Queries on the notifier's pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool


async def lock_event(conn: asyncpg.Connection, event_id: uuid.UUID) -> None:
    """Serialise an event's decision and its analysis: the analysis arriving in the same
    instant either is seen by the decision (no wait) or sees its deliveries (releases
    them), never neither."""
    key = f"notifier:event:{event_id}"
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)

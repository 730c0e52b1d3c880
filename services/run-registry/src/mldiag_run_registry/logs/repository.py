"""All SQL about log chunks: storing them once, walking a run's chunks in time order (and
those stored after a follower's last read), deleting them by age or by run."""

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from mldiag_run_registry.logs.chunks import Chunk

_INSERT_SQL = """
INSERT INTO log_chunks (run_id, batch_id, part, host, stream, first_time, last_time,
                        line_count, max_severity, body)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::smallint[], $4::text[], $5::text[],
                     $6::timestamptz[], $7::timestamptz[], $8::int[], $9::smallint[],
                     $10::bytea[])
ON CONFLICT (run_id, batch_id, part) DO NOTHING
"""

# Chunks that may hold lines past `after` (`last_time >= $2`), in the order of their first
# line, from the keyset position ($3, $4, $5) on; `$6`… narrow by host, stream, severity
# and time window. Walks log_chunks_by_time; the other conditions filter its rows.
_COLUMNS = "batch_id, part, host, stream, first_time, line_count, body"
_FILTER = """
  AND ($2::text IS NULL OR host = $2)
  AND ($3::text IS NULL OR stream = $3)
  AND max_severity >= $4
  AND ($5::timestamptz IS NULL OR first_time <= $5)
"""
_WALK_SQL = f"""
SELECT {_COLUMNS} FROM log_chunks
WHERE run_id = $1 {_FILTER} AND last_time >= $6
  AND (first_time, batch_id, part) > ($7, $8, $9)
ORDER BY first_time, batch_id, part
LIMIT $10
"""
# Chunks stored after `$6` (a follower's last read) that may hold lines at or before its
# place (`first_time <= $7`): lines that came late.
_LATE_SQL = f"""
SELECT {_COLUMNS} FROM log_chunks
WHERE run_id = $1 {_FILTER} AND seq > $6 AND first_time <= $7
ORDER BY seq
LIMIT $8
"""
_LAST_SEQ_SQL = "SELECT coalesce(max(seq), 0) FROM log_chunks WHERE run_id = $1"

_DELETE_OLD_SQL = """
DELETE FROM log_chunks WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM log_chunks WHERE last_time < $1 LIMIT $2
))
"""

_DELETE_RUN_SQL = """
DELETE FROM log_chunks WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM log_chunks WHERE run_id = $1 LIMIT $2
))
"""


@dataclass(frozen=True)
class StoredChunk:
    """A chunk as read back, its body still compressed."""

    batch_id: uuid.UUID
    part: int
    host: str
    stream: str
    first_time: datetime
    line_count: int
    body: bytes


@dataclass(frozen=True)
class ChunkFilter:
    """Which chunks of a run a read needs (None: any)."""

    run_id: str
    after: datetime
    """Only chunks whose last line is at or after this time."""
    host: str | None = None
    stream: str | None = None
    min_severity: int = 0
    until: datetime | None = None
    """Only chunks whose first line is at or before this time."""


ChunkKey = tuple[datetime, uuid.UUID, int]
"""A chunk's place in a run's walk: first time, batch id, part."""


def _chunks(rows: list[asyncpg.Record]) -> list[StoredChunk]:
    return [
        StoredChunk(
            row["batch_id"],
            row["part"],
            row["host"],
            row["stream"],
            row["first_time"],
            row["line_count"],
            row["body"],
        )
        for row in rows
    ]


class ChunkReader:
    """Reads of one run's chunks, all in one snapshot (a page sees one state of the table)."""

    def __init__(self, connection: asyncpg.Connection, where: ChunkFilter) -> None:
        self._connection = connection
        self._where = where

    def _filter(self) -> tuple[object, ...]:
        where = self._where
        return (where.run_id, where.host, where.stream, where.min_severity, where.until)

    async def last_seq(self) -> int:
        """The highest store sequence of the run's chunks (0 when none)."""
        seq: int = await self._connection.fetchval(_LAST_SEQ_SQL, self._where.run_id)
        return seq

    async def walk(self, start: ChunkKey, limit: int) -> list[StoredChunk]:
        """Up to ``limit`` chunks after ``start`` in walk order."""
        rows = await self._connection.fetch(
            _WALK_SQL, *self._filter(), self._where.after, *start, limit
        )
        return _chunks(rows)

    async def late(self, after_seq: int, until: datetime, limit: int) -> list[StoredChunk]:
        """Up to ``limit`` chunks stored after ``after_seq`` whose first line is at or
        before ``until``."""
        rows = await self._connection.fetch(_LATE_SQL, *self._filter(), after_seq, until, limit)
        return _chunks(rows)


class LogsRepository:
    """Log chunks in the registry's schema."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def store(self, chunks: Sequence[Chunk]) -> int:
        """Insert chunks, skipping those already stored; how many were new."""
        if not chunks:
            return 0
        status = await self._pool.execute(
            _INSERT_SQL,
            [c.run_id for c in chunks],
            [c.batch_id for c in chunks],
            [c.part for c in chunks],
            [c.host for c in chunks],
            [c.stream.value for c in chunks],
            [c.first_time for c in chunks],
            [c.last_time for c in chunks],
            [c.line_count for c in chunks],
            [c.max_severity for c in chunks],
            [c.body for c in chunks],
        )
        return int(status.rsplit(" ", 1)[-1])

    @contextlib.asynccontextmanager
    async def reading(self, where: ChunkFilter) -> AsyncIterator[ChunkReader]:
        """A reader of the chunks ``where`` selects, in one read-only snapshot."""
        async with (
            self._pool.acquire() as connection,
            connection.transaction(isolation="repeatable_read", readonly=True),
        ):
            yield ChunkReader(connection, where)

    async def delete_older_than(self, cutoff: datetime, batch: int) -> int:
        """Delete up to ``batch`` chunks whose last line is before ``cutoff``; how many."""
        status = await self._pool.execute(_DELETE_OLD_SQL, cutoff, batch)
        return int(status.rsplit(" ", 1)[-1])

    async def delete_run(self, run_id: str, batch: int) -> int:
        """Delete up to ``batch`` chunks of one run; how many."""
        status = await self._pool.execute(_DELETE_RUN_SQL, run_id, batch)
        return int(status.rsplit(" ", 1)[-1])

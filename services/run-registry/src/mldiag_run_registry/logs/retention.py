"""Log retention: whole chunks older than the retention period are deleted, in batches, by a
background task; a run's chunks can be purged at once.

A chunk goes when its last line is older than the period (``log_retention_days``; 0 keeps
everything), so a page never shows half a batch. Deleting in batches keeps each statement
short: a first sweep over months of logs does not hold locks or WAL for long. Replicas
sweeping together delete disjoint or already-deleted rows, which is harmless.
"""

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_platform.periodic import periodically
from mldiag_run_registry.logs.repository import LogsRepository

log = structlog.get_logger(__name__)

DELETE_BATCH = 1000
"""Chunks deleted per statement."""


class LogRetention:
    """Deletes chunks past the retention period, and a run's chunks on request."""

    def __init__(self, repository: LogsRepository, days: int) -> None:
        self._repository = repository
        self._period = timedelta(days=days) if days > 0 else None

    async def sweep(self, now: datetime | None = None) -> int:
        """Delete every chunk whose last line is older than the period; how many."""
        if self._period is None:
            return 0
        cutoff = (now or datetime.now(UTC)) - self._period
        deleted = 0
        while True:
            done = await self._repository.delete_older_than(cutoff, DELETE_BATCH)
            deleted += done
            if done < DELETE_BATCH:
                break
        if deleted:
            log.info("logs.retention.deleted", chunks=deleted, cutoff=cutoff.isoformat())
        return deleted

    async def purge_run(self, run_id: str) -> int:
        """Delete every chunk of a run; how many."""
        deleted = 0
        while True:
            done = await self._repository.delete_run(run_id, DELETE_BATCH)
            deleted += done
            if done < DELETE_BATCH:
                break
        log.info("logs.run.purged", run_id=run_id, chunks=deleted)
        return deleted


def retaining(
    retention: LogRetention, every_seconds: float
) -> contextlib.AbstractAsyncContextManager[asyncio.Task[None]]:
    """Sweep every ``every_seconds`` (and once at start) for as long as the block runs; a
    failed sweep is logged and tried again at the next tick."""
    return periodically(
        retention.sweep,
        every_seconds,
        name="log-retention",
        failed="logs.retention.sweep_failed",
        first_now=True,
    )

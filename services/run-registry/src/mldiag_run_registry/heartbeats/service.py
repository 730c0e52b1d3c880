"""Heartbeats of a run's processes: the latest of each, and whether it is late (no SQL here).

A process is *overdue* when more than twice its announced interval has passed since its
latest heartbeat: one missed beat is jitter, two are a sign (the hang rule of the event
detector decides what it means).
"""

from collections.abc import Sequence
from datetime import datetime, timedelta

from mldiag_run_registry.heartbeats.repository import HeartbeatsRepository
from mldiag_run_registry.lookup import RunLookup
from mldiag_schemas.telemetry import ProcessHeartbeat, RunHeartbeat

OVERDUE_INTERVALS = 2.0


class HeartbeatsService:
    """Records heartbeats as they arrive; serves the latest per process."""

    def __init__(self, repository: HeartbeatsRepository, runs: RunLookup) -> None:
        self._repository = repository
        self._runs = runs

    async def record(self, heartbeats: Sequence[RunHeartbeat]) -> None:
        """Keep the latest heartbeat of each process in ``heartbeats`` (idempotent), and the
        earliest time its pid was heard."""
        latest: dict[tuple[str, str, int], RunHeartbeat] = {}
        first: dict[tuple[str, str, int, int], datetime] = {}
        for beat in heartbeats:
            key = (beat.run_id, beat.host, beat.process_index)
            if key not in latest or beat.received_at > latest[key].received_at:
                latest[key] = beat
            pid_key = (*key, beat.pid)
            first[pid_key] = min(first.get(pid_key, beat.received_at), beat.received_at)
        if latest:
            await self._repository.record(
                [(beat, first[(*key, beat.pid)]) for key, beat in latest.items()]
            )

    async def list_heartbeats(
        self, project: str, location: str, run_id: str, now: datetime
    ) -> list[ProcessHeartbeat]:
        """The latest heartbeat of every process of the run, by host then process index."""
        await self._runs.get_run(project, location, run_id)
        return [
            ProcessHeartbeat(
                host=row["host"],
                process_index=row["process_index"],
                pid=row["pid"],
                step=row["step"],
                interval_seconds=row["interval_seconds"],
                last_seen_time=row["last_seen"],
                first_seen_time=row["first_seen"],
                overdue=now - row["last_seen"]
                > timedelta(seconds=OVERDUE_INTERVALS * row["interval_seconds"]),
            )
            for row in await self._repository.latest(run_id)
        ]

"""Workload events and analyses of a run (no SQL here)."""

from collections.abc import Sequence

from mldiag_run_registry.events.repository import EventsRepository
from mldiag_run_registry.lookup import RunLookup
from mldiag_schemas.analyses import Analysis
from mldiag_schemas.events import WorkloadEvent


class EventsService:
    """Records what the detector and analyzer publish; serves it per run."""

    def __init__(self, repository: EventsRepository, runs: RunLookup) -> None:
        self._repository = repository
        self._runs = runs

    async def store_events(self, events: Sequence[WorkloadEvent]) -> int:
        """Record workload events (idempotent)."""
        return await self._repository.store_events(events)

    async def store_analyses(self, analyses: Sequence[Analysis]) -> int:
        """Record analyses (idempotent)."""
        return await self._repository.store_analyses(analyses)

    async def list_events(self, project: str, location: str, run_id: str) -> list[WorkloadEvent]:
        """A run's events, oldest first."""
        await self._runs.get_run(project, location, run_id)
        return await self._repository.list_events(run_id)

    async def list_analyses(self, project: str, location: str, run_id: str) -> list[Analysis]:
        """A run's analyses, oldest first."""
        await self._runs.get_run(project, location, run_id)
        return await self._repository.list_analyses(run_id)

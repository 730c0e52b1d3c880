"""What the registry's parts need from the run resource: whether a run exists (under a
parent, or by id alone), and where a run's output-only metric summary goes."""

from typing import Protocol

from mldiag_schemas.runs import Run, RunMetricsSummary


class RunLookup(Protocol):
    """Finds a run or raises ``RunNotFound`` (``InvalidRunId`` for an impossible id)."""

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        """The run under that parent."""
        ...


class SummaryWriter(Protocol):
    """Stores a run's output-only metric averages."""

    async def set_metrics_summary(self, run_id: str, summary: RunMetricsSummary) -> None:
        """Replace the run's summary."""
        ...


class RunFinder(Protocol):
    """Finds a run by id under any parent (bus messages carry only the run id)."""

    async def find_run(self, run_id: str) -> tuple[str, str, Run] | None:
        """(project, location, run), deleted or not; None when no run has that id."""
        ...

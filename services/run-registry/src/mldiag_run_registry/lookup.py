"""What the registry's parts need from the run resource: whether a run exists, and where a
run's output-only metric summary goes."""

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

"""What the registry's parts need from the run resource: whether a run exists."""

from typing import Protocol

from mldiag_schemas.runs import Run


class RunLookup(Protocol):
    """Finds a run or raises ``RunNotFound`` (``InvalidRunId`` for an impossible id)."""

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        """The run under that parent."""
        ...

"""The registry's own id in paths: a run's (``invalid_run_id``).

How routes are addressed (the full and the short parent, the project and location checks,
``checked_id``) is the platform's, :mod:`mldiag_platform.resources`.
"""

from typing import Annotated

from fastapi import Depends

from mldiag_platform.resources import checked_id, id_path
from mldiag_run_registry.errors import InvalidRunId


def _run_id(run_id: Annotated[str, id_path("The run id.")]) -> str:
    return checked_id(run_id, "run_id", error=InvalidRunId)


RunIdPath = Annotated[str, Depends(_run_id)]
"""The run id of the path, checked (``invalid_run_id``)."""

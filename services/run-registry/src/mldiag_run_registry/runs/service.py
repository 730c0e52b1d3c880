"""Runs: creating, reading and listing them (no SQL, no bus client here)."""

from datetime import UTC, datetime

import structlog

from mldiag_platform.outbox import Flusher
from mldiag_run_registry.errors import InvalidPageToken, InvalidRunId
from mldiag_run_registry.paging import decode_token, encode_token, page_size
from mldiag_run_registry.runs.errors import RunAlreadyExists, RunNotFound
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_schemas.ids import is_run_id, new_run_id, run_name
from mldiag_schemas.runs import CreateRunRequest, ListRunsResponse, Run, RunCreated, RunState

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 1000


def check_run_id(run_id: str) -> None:
    """Refuse a run id that cannot exist, before any query."""
    if not is_run_id(run_id):
        raise InvalidRunId(
            f"invalid run id {run_id!r}: use lower-case letters, digits and '-' (max 63)"
        )


class RunService:
    """The run resource."""

    def __init__(self, repository: RunRepository, outbox: Flusher) -> None:
        self._repository = repository
        self._outbox = outbox

    async def create_run(self, project: str, location: str, request: CreateRunRequest) -> Run:
        """Create a run (ACTIVE) and announce it once committed."""
        now = datetime.now(UTC)
        run_id = request.run_id or new_run_id()
        run = Run(
            name=run_name(project, location, run_id),
            run_id=run_id,
            display_name=request.display_name,
            run_set=request.run_set,
            labels=request.labels,
            state=RunState.ACTIVE,
            create_time=now,
            update_time=now,
        )
        created = await self._repository.insert_run(
            project, location, run, [RunCreated(occurred_at=now, run=run)]
        )
        if not created:
            raise RunAlreadyExists(f"run {run_id!r} already exists")
        await self._outbox.flush()
        log.info("run.created", run_id=run_id, project=project)
        return run

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        """The run, or :class:`RunNotFound`."""
        check_run_id(run_id)
        run = await self._repository.get_run(project, location, run_id)
        if run is None:
            raise RunNotFound(f"run {run_name(project, location, run_id)!r} not found")
        return run

    async def list_runs(
        self, project: str, location: str, requested_size: int | None, page_token: str
    ) -> ListRunsResponse:
        """A page of runs, newest first."""
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        after = None
        if page_token:
            fields = decode_token(page_token)
            try:
                after = (datetime.fromisoformat(fields["t"]), str(fields["r"]))
            except (KeyError, TypeError, ValueError):
                raise InvalidPageToken("the page token is not valid") from None
        runs = await self._repository.list_runs(project, location, size + 1, after)
        token = ""
        if len(runs) > size:
            runs = runs[:size]
            token = encode_token({"t": runs[-1].create_time.isoformat(), "r": runs[-1].run_id})
        return ListRunsResponse(machine_learning_runs=runs, next_page_token=token)

"""The custom-jobs API's domain: creating, reading, listing, cancelling and deleting jobs.

A job is stored QUEUED with its ``CustomJobCreated`` staged in the same transaction; the
scheduler is told after commit (it places replicas once the job's run exists). A cancel
marks the job CANCELLING and hands it to the scheduler, which stops its replicas and ends
it CANCELLED. Only an ended job may be deleted.
"""

import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

import structlog

from mldiag_platform.listing.filtering import FieldSpec, Kind, OrderKey, field_table
from mldiag_platform.outbox import Flusher
from mldiag_schemas.jobs import (
    DEFAULT_TIMEOUT_SECONDS,
    TERMINAL_JOB_STATES,
    CustomJob,
    CustomJobSpec,
    JobState,
    ListCustomJobsResponse,
    ListReplicasResponse,
)
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_schemas.tuning import TrialOfJob
from mldiag_training.errors import not_found
from mldiag_training.jobs.errors import (
    CustomJobNotFound,
    InvalidCustomJob,
    JobNotCancellable,
    JobNotTerminal,
)
from mldiag_training.jobs.repository import JobsRepository, job_name
from mldiag_training.jobs.validation import MachineResolver, check_machines
from mldiag_training.listing import Listing, named_value, page_query
from mldiag_training.vertex import enum_name

log = structlog.get_logger(__name__)

DEFAULT_RUN_SET = "training-jobs"
"""The run set of a job's run when its spec names no experiment."""

CANCELLABLE = frozenset({JobState.QUEUED, JobState.PENDING, JobState.RUNNING})
"""States a cancel moves to CANCELLING (a CANCELLING job is cancelled already)."""

_MAX_ID_ATTEMPTS = 5


class SchedulerHooks(Protocol):
    """What the jobs API asks of the scheduler."""

    async def refuse_unfittable(self, spec: CustomJobSpec) -> None:
        """Raise FAILED_PRECONDITION for a job no executor seen lately could ever fit."""
        ...

    async def cancel_requested(self, job_id: str) -> None:
        """A job was marked CANCELLING: stop its replicas."""
        ...


def _state(value: str) -> str | None:
    try:
        name = enum_name(JobState, value)
    except ValueError:
        try:
            name = enum_name(JobState, f"JOB_STATE_{value}")  # `state=RUNNING`
        except ValueError:
            return None
    return name


FIELDS = field_table(
    (
        FieldSpec("display_name", Kind.STRING, aliases=("displayName",)),
        FieldSpec("state", Kind.ENUM, normalise=_state),
        FieldSpec("labels", Kind.MAP, orderable=False),
        FieldSpec("create_time", Kind.TIMESTAMP, aliases=("createTime",)),
        # Unset until the job runs or ends: filterable, but no keyset can page over NULL.
        FieldSpec("start_time", Kind.TIMESTAMP, aliases=("startTime",), orderable=False),
        FieldSpec("end_time", Kind.TIMESTAMP, aliases=("endTime",), orderable=False),
        FieldSpec("update_time", Kind.TIMESTAMP, aliases=("updateTime",)),
    )
)
"""What ``filter`` and ``orderBy`` may name (Vertex's snake_case, camelCase accepted)."""

JOB_LISTING = Listing(
    fields=FIELDS,
    default_order=(OrderKey("create_time", descending=True),),
    id_field="job_id",
    timestamps=frozenset({"create_time", "start_time", "end_time", "update_time"}),
)
"""How lists of jobs are filtered, ordered (newest first by default) and paged (tuning jobs'
too: they have the same fields)."""


def new_job_id() -> str:
    """A job id of digits, like Vertex's: microseconds since the epoch and three random
    digits (19 digits until the year 2286), so ids sort roughly by creation."""
    return f"{time.time_ns() // 1000}{secrets.randbelow(1000):03d}"


class JobsService:
    """Custom jobs of one installation, in every project and location."""

    def __init__(
        self,
        repository: JobsRepository,
        flusher: Flusher,
        scheduler: SchedulerHooks,
        machines: MachineResolver,
    ) -> None:
        self._repository = repository
        self._flusher = flusher
        self._scheduler = scheduler
        self._machines = machines

    async def create(
        self,
        project: str,
        location: str,
        body: CustomJob,
        *,
        job_id: str | None = None,
        run_set: str | None = None,
        trial: TrialOfJob | None = None,
    ) -> CustomJob:
        """Store ``body`` (validated by :func:`validation.parse_custom_job`) as a new QUEUED
        job, announce it, tell the scheduler; answers the job as stored.

        With ``job_id`` (chosen up front by a caller that must create the job exactly once:
        a tuning trial, a pipeline's task) the create is idempotent: if that job exists it
        is answered unchanged and nothing is announced again. ``run_set`` overrides the run
        set of the job's run; ``trial`` marks it as a trial of a tuning job."""
        if job_id is not None:
            existing = await self._repository.get(project, location, job_id)
            if existing is not None:
                return existing
        spec = body.job_spec
        check_machines(spec, self._machines)
        await self._scheduler.refuse_unfittable(spec)
        timeout = spec.scheduling.timeout if spec.scheduling else None
        for _ in range(1 if job_id is not None else _MAX_ID_ATTEMPTS):
            chosen = job_id if job_id is not None else new_job_id()
            now = datetime.now(UTC)
            try:
                deadline = now + timedelta(seconds=timeout or DEFAULT_TIMEOUT_SECONDS)
            except OverflowError:
                problem = "is too long (the deadline passes the year 9999)"
                raise InvalidCustomJob(
                    f"jobSpec.scheduling.timeout {problem}",
                    details=[{"field": "jobSpec.scheduling.timeout", "problem": problem}],
                ) from None
            job = body.model_copy(
                update={
                    "name": job_name(project, location, chosen),
                    "state": JobState.QUEUED,
                    "create_time": now,
                    "update_time": now,
                    "start_time": None,
                    "end_time": None,
                    "error": None,
                    "web_access_uris": {},
                }
            )
            created = CustomJobCreated(
                job_id=chosen,
                project=project,
                location=location,
                job=job,
                run_set=run_set or spec.experiment or DEFAULT_RUN_SET,
                trial=trial,
                occurred_at=now,
            )
            if await self._repository.insert(project, location, job, chosen, deadline, created):
                break
            if job_id is not None:  # created meanwhile by a racing caller: answer theirs
                existing = await self._repository.get(project, location, job_id)
                if existing is not None:
                    return existing
                raise RuntimeError(f"job {job_id} exists in another project or location")
        else:  # pragma: no cover - 1000 ids per microsecond would have to collide
            raise RuntimeError("no free job id after several attempts")
        # No nudge: the scheduler places a job once its run exists (run-registry's
        # RunCreated, which this flush sets off), not before.
        await self._flusher.flush()
        return job

    async def get(self, project: str, location: str, job_id: str) -> CustomJob:
        """One job, or NOT_FOUND."""
        job = await self._repository.get(project, location, job_id)
        if job is None:
            raise _not_found(project, location, job_id)
        return job

    async def list_jobs(
        self,
        project: str,
        location: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str = "",
        order_by: str = "",
    ) -> ListCustomJobsResponse:
        """A page of the parent's jobs matching ``filter_text`` in ``order_by`` (newest
        first by default)."""
        query = page_query(JOB_LISTING, requested_size, page_token, filter_text, order_by)
        found = await self._repository.list_jobs(
            project, location, query.where, query.order, query.size + 1, query.after
        )
        jobs, token = query.page(found, named_value("job_id"))
        return ListCustomJobsResponse(custom_jobs=jobs, next_page_token=token)

    async def cancel(self, project: str, location: str, job_id: str) -> None:
        """Ask for a job to be cancelled: QUEUED, PENDING and RUNNING jobs become
        CANCELLING (a CANCELLING one stays so); an ended job is FAILED_PRECONDITION."""

        def changed(previous: JobState, restarts: int) -> CustomJobStateChanged:
            return CustomJobStateChanged(
                job_id=job_id,
                project=project,
                location=location,
                previous_state=previous,
                state=JobState.CANCELLING,
                restarts=restarts,
            )

        now = datetime.now(UTC)
        previous = await self._repository.request_cancel(
            project, location, job_id, CANCELLABLE, now, changed
        )
        if previous is None:
            raise _not_found(project, location, job_id)
        if previous in TERMINAL_JOB_STATES:
            raise JobNotCancellable(
                f"the job has ended ({previous.value}): there is nothing to cancel",
                details=[{"state": previous.value}],
            )
        if previous in CANCELLABLE:
            await self._flusher.flush()
        await _nudge(self._scheduler.cancel_requested, job_id)

    async def delete(self, project: str, location: str, job_id: str) -> str:
        """Delete an ended job (FAILED_PRECONDITION otherwise); answers the name of the
        done delete operation."""
        state = await self._repository.delete(project, location, job_id, TERMINAL_JOB_STATES)
        if state is None:
            raise _not_found(project, location, job_id)
        if state not in TERMINAL_JOB_STATES:
            raise JobNotTerminal(
                f"the job is {state.value}: cancel it and wait until it has ended to delete it",
                details=[{"state": state.value}],
            )
        return f"{job_name(project, location, job_id)}/operations/{new_job_id()}"

    async def replicas(self, project: str, location: str, job_id: str) -> ListReplicasResponse:
        """Every replica's current attempt (none before the job is placed)."""
        replicas = await self._repository.replicas(project, location, job_id)
        if replicas is None:
            raise _not_found(project, location, job_id)
        return ListReplicasResponse(replicas=replicas)


async def _nudge(call: Callable[[str], Awaitable[None]], job_id: str) -> None:
    """Tell the scheduler now; if that fails, its next tick finds the committed change
    anyway, so the caller still hears that its request was taken."""
    try:
        await call(job_id)
    except Exception:  # committed already: a late scheduler is not an error
        log.exception("jobs.scheduler_nudge_failed", job_id=job_id)


def _not_found(project: str, location: str, job_id: str) -> CustomJobNotFound:
    return not_found(CustomJobNotFound, job_name(project, location, job_id))

"""The hyperparameterTuningJobs API's domain: creating, reading, listing, cancelling and
deleting tuning jobs (studies).

A study is stored QUEUED with its ``TuningJobCreated`` staged in the same transaction; the
controller is told after commit and runs its trials. A cancel marks the study CANCELLING;
the controller cancels its active trials' jobs and ends it CANCELLED. Only an ended study
may be deleted (its trials' rows go with it, their custom jobs stay).
"""

import secrets
from datetime import UTC, datetime
from typing import Protocol

import structlog

from mldiag_platform.outbox import Flusher
from mldiag_schemas.jobs import TERMINAL_JOB_STATES, CustomJobSpec, JobState
from mldiag_schemas.tuning import (
    HyperparameterTuningJob,
    ListHyperparameterTuningJobsResponse,
    TuningJobCreated,
    TuningJobStateChanged,
)
from mldiag_training.errors import not_found
from mldiag_training.jobs.service import JOB_LISTING, new_job_id
from mldiag_training.listing import named_value, page_query
from mldiag_training.tuning.errors import (
    TuningJobNotCancellable,
    TuningJobNotFound,
    TuningJobNotTerminal,
)
from mldiag_training.tuning.repository import StudyRow, TuningRepository, tuning_job_name

log = structlog.get_logger(__name__)

CANCELLABLE = frozenset({JobState.QUEUED, JobState.PENDING, JobState.RUNNING})
"""States a cancel moves to CANCELLING."""

_MAX_ID_ATTEMPTS = 5


class ControllerHooks(Protocol):
    """What the API asks of the controller."""

    async def check_trial_spec(self, spec: CustomJobSpec) -> None:
        """Refuse a trial spec no trial could run (unknown machine, nothing fits)."""
        ...

    def nudge(self, job_id: str) -> None:
        """A study changed (created, cancel asked): look at it soon."""
        ...


class TuningService:
    """Tuning jobs of one installation, in every project and location."""

    def __init__(
        self, repository: TuningRepository, flusher: Flusher, controller: ControllerHooks
    ) -> None:
        self._repository = repository
        self._flusher = flusher
        self._controller = controller

    async def create(
        self,
        project: str,
        location: str,
        body: HyperparameterTuningJob,
        *,
        job_id: str | None = None,
    ) -> HyperparameterTuningJob:
        """Store ``body`` (validated by :func:`validation.parse_tuning_job`) as a new QUEUED
        study, announce it, tell the controller; answers the study as stored.

        With ``job_id`` chosen up front (a pipeline's tuning task) the create is idempotent:
        an existing study of that id is answered unchanged and nothing is announced again."""
        if job_id is not None:
            existing = await self._repository.get(project, location, job_id)
            if existing is not None:
                return existing
        await self._controller.check_trial_spec(body.trial_job_spec)
        for _ in range(1 if job_id is not None else _MAX_ID_ATTEMPTS):
            chosen = job_id if job_id is not None else new_job_id()
            now = datetime.now(UTC)
            job = body.model_copy(
                update={
                    "name": tuning_job_name(project, location, chosen),
                    "state": JobState.QUEUED,
                    "trials": [],
                    "create_time": now,
                    "update_time": now,
                    "start_time": None,
                    "end_time": None,
                    "error": None,
                }
            )
            study = StudyRow(
                job_id=chosen,
                project=project,
                location=location,
                job=job,
                seed=secrets.randbelow(2**31),
            )
            created = TuningJobCreated(
                job_id=chosen,
                project=project,
                location=location,
                job=job,
                run_set=job.display_name,
                occurred_at=now,
            )
            if await self._repository.insert(study, created):
                break
            if job_id is not None:
                existing = await self._repository.get(project, location, job_id)
                if existing is not None:
                    return existing
                raise RuntimeError(f"tuning job {job_id} exists in another project or location")
        else:  # pragma: no cover - ids would have to collide five times
            raise RuntimeError("no free job id after several attempts")
        await self._flusher.flush()
        self._controller.nudge(chosen)
        log.info("tuning.created", job_id=chosen, trials=job.max_trial_count)
        return job

    async def get(self, project: str, location: str, job_id: str) -> HyperparameterTuningJob:
        """One study with its trials, or NOT_FOUND."""
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
    ) -> ListHyperparameterTuningJobsResponse:
        """A page of the parent's studies matching ``filter_text`` in ``order_by`` (newest
        first by default)."""
        query = page_query(JOB_LISTING, requested_size, page_token, filter_text, order_by)
        found = await self._repository.list_jobs(
            project, location, query.where, query.order, query.size + 1, query.after
        )
        jobs, token = query.page(found, named_value("job_id"))
        return ListHyperparameterTuningJobsResponse(
            hyperparameter_tuning_jobs=jobs, next_page_token=token
        )

    async def cancel(self, project: str, location: str, job_id: str) -> None:
        """Ask for a study to be cancelled (CANCELLING, then CANCELLED once its active
        trials' jobs have ended); an ended study is FAILED_PRECONDITION."""

        def changed(previous: JobState) -> TuningJobStateChanged:
            return TuningJobStateChanged(
                job_id=job_id,
                project=project,
                location=location,
                previous_state=previous,
                state=JobState.CANCELLING,
            )

        previous = await self._repository.request_cancel(
            project, location, job_id, CANCELLABLE, datetime.now(UTC), changed
        )
        if previous is None:
            raise _not_found(project, location, job_id)
        if previous in TERMINAL_JOB_STATES:
            raise TuningJobNotCancellable(
                f"the tuning job has ended ({previous.value}): there is nothing to cancel",
                details=[{"state": previous.value}],
            )
        if previous in CANCELLABLE:
            await self._flusher.flush()
        self._controller.nudge(job_id)

    async def delete(self, project: str, location: str, job_id: str) -> str:
        """Delete an ended study and its trials' rows (their custom jobs stay); answers the
        name of the done delete operation."""
        state = await self._repository.delete(project, location, job_id, TERMINAL_JOB_STATES)
        if state is None:
            raise _not_found(project, location, job_id)
        if state not in TERMINAL_JOB_STATES:
            raise TuningJobNotTerminal(
                f"the tuning job is {state.value}: cancel it and wait until it has ended"
                " to delete it",
                details=[{"state": state.value}],
            )
        return f"{tuning_job_name(project, location, job_id)}/operations/{new_job_id()}"


def _not_found(project: str, location: str, job_id: str) -> TuningJobNotFound:
    return not_found(TuningJobNotFound, tuning_job_name(project, location, job_id))

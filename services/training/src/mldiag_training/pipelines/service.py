"""The training-pipelines domain: a pipeline runs one job and imports the model it wrote.

- **Create.** The pipeline's job id is chosen up front and stored with the pipeline; then the
  job is created through its own service (idempotent by that id). A job its service refuses
  (an unknown machine type, a pool no executor could ever fit) takes the pipeline with it:
  nothing is left half-created. A pipeline whose job is missing at start (a crash between the
  two) gets its job then (:meth:`PipelinesService.reconcile`).
- **Follow.** The job's state changes (on the bus) move the pipeline: QUEUED → PENDING →
  RUNNING as the job goes; the job FAILED or CANCELLED ends the pipeline so, with the job's
  error. The job SUCCEEDED: without ``modelToUpload`` the pipeline SUCCEEDED; with it the
  files under ``<base>/model/`` (a tuning job: the best trial's ``<base>/<trial>/model/``) are
  imported as a model version (idempotent by the pipeline's name, so a redelivered fact or a
  restart imports once), ``modelToUpload`` gets the version's name and id, then SUCCEEDED; no
  files there: FAILED, ``no model artifacts in AIP_MODEL_DIR (<uri>)``.
- **Cancel.** CANCELLING, and the job is cancelled; CANCELLED once the job has ended.
"""

from datetime import UTC, datetime
from typing import Protocol

import structlog

from mldiag_platform.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    MldiagError,
    NotFound,
)
from mldiag_platform.listing.filtering import (
    FieldSpec,
    Kind,
    OrderKey,
    field_table,
)
from mldiag_schemas.jobs import CustomJob, JobState, RpcStatus
from mldiag_schemas.models import Model, ModelLineage
from mldiag_schemas.pipelines import (
    BACKING_CUSTOM_JOB,
    BACKING_TUNING_JOB,
    ListTrainingPipelinesResponse,
    PipelineState,
    TrainingPipeline,
)
from mldiag_schemas.tuning import GoalType, HyperparameterTuningJob, Trial, TrialState
from mldiag_training.errors import not_found
from mldiag_training.jobs.service import new_job_id
from mldiag_training.jobs.validation import MachineResolver, check_machines
from mldiag_training.listing import Listing, named_value, page_query
from mldiag_training.models.errors import NoModelArtifacts
from mldiag_training.pipelines.errors import (
    InvalidTrainingPipeline,
    PipelineNotCancellable,
    PipelineNotTerminal,
    TargetModelExists,
    TrainingPipelineNotFound,
)
from mldiag_training.pipelines.repository import (
    PipelinesRepository,
    StoredPipeline,
    job_resource,
    pipeline_name,
)
from mldiag_training.pipelines.validation import PipelineRequest, model_dir, restate
from mldiag_training.vertex import enum_name

log = structlog.get_logger(__name__)

PIPELINE_LABEL = "mldiag-pipeline"
"""The label a pipeline's job carries: the pipeline's id."""

ACTIVE = frozenset({PipelineState.QUEUED, PipelineState.PENDING, PipelineState.RUNNING})
"""States a job's progress moves a pipeline between, and that a cancel ends."""
_NOT_ENDED = frozenset(s for s in PipelineState if not s.terminal)

_FOLLOWS: dict[JobState, PipelineState] = {
    JobState.PENDING: PipelineState.PENDING,
    JobState.RUNNING: PipelineState.RUNNING,
}
_BEFORE: dict[PipelineState, frozenset[PipelineState]] = {
    PipelineState.PENDING: frozenset({PipelineState.QUEUED}),
    PipelineState.RUNNING: frozenset({PipelineState.QUEUED, PipelineState.PENDING}),
}
"""From where each mirrored state may be reached: a late fact never moves a pipeline back."""

_RPC_CODES: tuple[tuple[type[MldiagError], int], ...] = (
    (InvalidArgument, 3),
    (NotFound, 5),
    (AlreadyExists, 6),
    (FailedPrecondition, 9),
)
CANCELLED_CODE = 1
"""google.rpc.Code CANCELLED."""


class JobsApi(Protocol):
    """What a pipeline asks of the custom-jobs service."""

    async def create(
        self, project: str, location: str, body: CustomJob, *, job_id: str | None = None
    ) -> CustomJob:
        """Create the job (idempotent with ``job_id``)."""
        ...

    async def get(self, project: str, location: str, job_id: str) -> CustomJob:
        """One job, or NOT_FOUND."""
        ...

    async def cancel(self, project: str, location: str, job_id: str) -> None:
        """Cancel a job; FAILED_PRECONDITION once it has ended."""
        ...


class TuningApi(Protocol):
    """What a pipeline asks of the tuning service."""

    async def create(
        self,
        project: str,
        location: str,
        body: HyperparameterTuningJob,
        *,
        job_id: str | None = None,
    ) -> HyperparameterTuningJob:
        """Create the tuning job (idempotent with ``job_id``)."""
        ...

    async def get(self, project: str, location: str, job_id: str) -> HyperparameterTuningJob:
        """One tuning job, or NOT_FOUND."""
        ...

    async def cancel(self, project: str, location: str, job_id: str) -> None:
        """Cancel a tuning job; FAILED_PRECONDITION once it has ended."""
        ...


class ModelsApi(Protocol):
    """What a pipeline asks of the model registry."""

    async def import_version(
        self,
        project: str,
        location: str,
        model: Model,
        *,
        artifact_uri: str,
        parent_model: str = "",
        model_id: str = "",
        lineage: ModelLineage,
        idempotency_key: str = "",
    ) -> Model:
        """Register the files at ``artifact_uri`` as a version (once per key)."""
        ...

    async def get(self, project: str, location: str, name: str) -> Model:
        """A model's default version (``name`` is its id), or NOT_FOUND."""
        ...


def _state(value: str) -> str | None:
    numbers = {state.value: number for number, state in enumerate(PipelineState)}
    for candidate in (value, f"PIPELINE_STATE_{value}"):
        try:
            return enum_name(PipelineState, candidate, numbers)
        except ValueError:
            continue
    return None


FIELDS = field_table(
    (
        FieldSpec("display_name", Kind.STRING, aliases=("displayName",)),
        FieldSpec("state", Kind.ENUM, normalise=_state),
        FieldSpec("training_task_definition", Kind.STRING, aliases=("trainingTaskDefinition",)),
        FieldSpec("labels", Kind.MAP, orderable=False),
        FieldSpec("create_time", Kind.TIMESTAMP, aliases=("createTime",)),
        FieldSpec("start_time", Kind.TIMESTAMP, aliases=("startTime",), orderable=False),
        FieldSpec("end_time", Kind.TIMESTAMP, aliases=("endTime",), orderable=False),
        FieldSpec("update_time", Kind.TIMESTAMP, aliases=("updateTime",)),
    )
)
"""What ``filter`` and ``orderBy`` may name (Vertex's snake_case, camelCase accepted)."""

PIPELINE_LISTING = Listing(
    fields=FIELDS,
    default_order=(OrderKey("create_time", descending=True),),
    id_field="pipeline_id",
    timestamps=frozenset({"create_time", "start_time", "end_time", "update_time"}),
)
"""How lists of pipelines are filtered, ordered (newest first by default) and paged."""


def best_trial(job: HyperparameterTuningJob) -> Trial | None:
    """The SUCCEEDED trial with the best final value of the study's first metric."""
    metric = job.study_spec.metrics[0]
    scored: list[tuple[float, Trial]] = []
    for trial in job.trials:
        if trial.state is not TrialState.SUCCEEDED or trial.final_measurement is None:
            continue
        values = [
            m.value for m in trial.final_measurement.metrics if m.metric_id == metric.metric_id
        ]
        if values:
            scored.append((values[0], trial))
    if not scored:
        return None
    pick = min if metric.goal is GoalType.MINIMIZE else max
    return pick(scored, key=lambda pair: pair[0])[1]


def _rpc_code(error: MldiagError) -> int:
    return next((code for kind, code in _RPC_CODES if isinstance(error, kind)), 2)


class PipelinesService:
    """Training pipelines of one installation, in every project and location."""

    def __init__(
        self,
        repository: PipelinesRepository,
        jobs: JobsApi,
        tuning: TuningApi,
        models: ModelsApi,
        machines: MachineResolver,
    ) -> None:
        self._repository = repository
        self._jobs = jobs
        self._tuning = tuning
        self._models = models
        self._machines = machines

    async def create(
        self, project: str, location: str, request: PipelineRequest
    ) -> TrainingPipeline:
        """Store the pipeline (QUEUED) with its job's id, then create the job; answers the
        pipeline. A job refused by its service refuses the pipeline (nothing is stored)."""
        try:
            check_machines(request.spec, self._machines)
        except MldiagError as error:
            raise restate(error, request.kind) from None
        await self._check_model_target(project, location, request.pipeline)
        job = request.job
        labels = {**job.labels, PIPELINE_LABEL: ""}
        for _ in range(5):
            pipeline_id, job_id = new_job_id(), new_job_id()
            now = datetime.now(UTC)
            key = BACKING_CUSTOM_JOB if request.kind == "custom" else BACKING_TUNING_JOB
            pipeline = request.pipeline.model_copy(
                update={
                    "name": pipeline_name(project, location, pipeline_id),
                    "state": PipelineState.QUEUED,
                    "training_task_metadata": {
                        key: job_resource(project, location, request.kind, job_id)
                    },
                    "create_time": now,
                    "update_time": now,
                    "start_time": None,
                    "end_time": None,
                    "error": None,
                }
            )
            labels[PIPELINE_LABEL] = pipeline_id
            body = job.model_copy(update={"labels": labels}).model_dump_json(exclude_none=True)
            if await self._repository.insert(
                pipeline_id, project, location, pipeline, request.kind, job_id, body
            ):
                break
        else:  # pragma: no cover - ids of digits and time would have to collide five times
            raise RuntimeError("no free pipeline id after several attempts")
        stored = await self._repository.get(project, location, pipeline_id)
        assert stored is not None  # noqa: S101  # inserted just above
        try:
            await self._create_job(stored)
        except MldiagError as error:
            if error.http_status >= 500:
                raise  # the reconcile creates the job later: the pipeline stays
            await self._repository.forget(pipeline_id)
            raise restate(error, request.kind) from None
        log.info("pipelines.created", pipeline_id=pipeline_id, job_id=job_id, kind=request.kind)
        return pipeline

    async def _check_model_target(
        self, project: str, location: str, pipeline: TrainingPipeline
    ) -> None:
        """Refuse now, rather than when the job has run, a ``parentModel`` that does not
        exist here or a ``modelId`` that does."""
        parent = pipeline.parent_model
        if parent:
            here = f"projects/{project}/locations/{location}/models/"
            if "/" in parent and not parent.startswith(here):
                raise _invalid("parentModel", f"{parent} is not a model of {here[:-8]}")
            try:
                await self._models.get(project, location, parent.rsplit("/", 1)[-1])
            except NotFound:
                raise _invalid("parentModel", f"{parent} does not exist") from None
        elif pipeline.model_id:
            try:
                found = await self._models.get(project, location, pipeline.model_id)
            except NotFound:
                return
            raise TargetModelExists(
                f"modelId: {found.name} exists already: name it in parentModel to add a version",
                details=[{"field": "modelId", "resource": found.name}],
            )

    async def _create_job(self, stored: StoredPipeline) -> None:
        project, location, job_id = stored.project, stored.location, stored.job_id
        if stored.kind == "custom":
            body = CustomJob.model_validate_json(stored.job_body)
            await self._jobs.create(project, location, body, job_id=job_id)
        else:
            tuning = HyperparameterTuningJob.model_validate_json(stored.job_body)
            await self._tuning.create(project, location, tuning, job_id=job_id)
        await self._repository.mark_job_created(stored.pipeline_id)

    async def get(self, project: str, location: str, pipeline_id: str) -> TrainingPipeline:
        """One pipeline, or NOT_FOUND."""
        stored = await self._repository.get(project, location, pipeline_id)
        if stored is None:
            raise _not_found(project, location, pipeline_id)
        return stored.pipeline

    async def list_pipelines(
        self,
        project: str,
        location: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str = "",
        order_by: str = "",
    ) -> ListTrainingPipelinesResponse:
        """A page of the parent's pipelines matching ``filter_text`` in ``order_by`` (newest
        first by default)."""
        query = page_query(PIPELINE_LISTING, requested_size, page_token, filter_text, order_by)
        found = await self._repository.list_pipelines(
            project, location, query.where, query.order, query.size + 1, query.after
        )
        pipelines, token = query.page(found, named_value("pipeline_id"))
        return ListTrainingPipelinesResponse(training_pipelines=pipelines, next_page_token=token)

    async def cancel(self, project: str, location: str, pipeline_id: str) -> None:
        """Ask for a pipeline to be cancelled: it goes CANCELLING and its job is cancelled;
        CANCELLED once the job has ended. An ended pipeline is FAILED_PRECONDITION."""
        now = datetime.now(UTC)
        before = await self._repository.request_cancel(project, location, pipeline_id, ACTIVE, now)
        if before is None:
            raise _not_found(project, location, pipeline_id)
        state = before.pipeline.state
        if state.terminal:
            raise PipelineNotCancellable(
                f"the pipeline has ended ({state.value}): there is nothing to cancel",
                details=[{"state": state.value}],
            )
        await self._cancel_job(before)

    async def _cancel_job(self, stored: StoredPipeline) -> None:
        service: JobsApi | TuningApi = self._jobs if stored.kind == "custom" else self._tuning
        try:
            await service.cancel(stored.project, stored.location, stored.job_id)
        except (FailedPrecondition, NotFound):
            # The job has ended (or was never created): nothing will say so again.
            await self._end_cancelled(stored, None)

    async def delete(self, project: str, location: str, pipeline_id: str) -> str:
        """Delete an ended pipeline (FAILED_PRECONDITION otherwise; its job stays); answers
        the name of the done delete operation."""
        ended = frozenset(s for s in PipelineState if s.terminal)
        state = await self._repository.delete(project, location, pipeline_id, ended)
        if state is None:
            raise _not_found(project, location, pipeline_id)
        if not state.terminal:
            raise PipelineNotTerminal(
                f"the pipeline is {state.value}: cancel it and wait until it has ended to "
                "delete it",
                details=[{"state": state.value}],
            )
        return f"{pipeline_name(project, location, pipeline_id)}/operations/{new_job_id()}"

    # --- following the job -------------------------------------------------------------

    async def job_changed(
        self,
        job_id: str,
        state: JobState,
        error: RpcStatus | None = None,
        best: Trial | None = None,
    ) -> None:
        """A custom or tuning job moved to ``state``: move its pipeline, if it has one
        (idempotent: a redelivered or late fact changes nothing)."""
        stored = await self._repository.by_job(job_id)
        if stored is None or stored.pipeline.state.terminal:
            return
        with structlog.contextvars.bound_contextvars(
            pipeline_id=stored.pipeline_id, job_id=job_id, job_state=state.value
        ):
            await self._follow(stored, state, error, best)

    async def _follow(
        self, stored: StoredPipeline, state: JobState, error: RpcStatus | None, best: Trial | None
    ) -> None:
        now = datetime.now(UTC)
        mirrored = _FOLLOWS.get(state)
        if mirrored is not None:
            await self._repository.move(stored.pipeline_id, _BEFORE[mirrored], mirrored, now)
        elif state is JobState.SUCCEEDED:
            if stored.cancel_requested:
                await self._end_cancelled(stored, None)
            else:
                await self._succeeded(stored, best)
        elif state in (JobState.FAILED, JobState.EXPIRED):
            failure = error or RpcStatus(code=2, message=f"the job ended {state.value}")
            await self._end(stored, PipelineState.FAILED, failure)
        elif state is JobState.CANCELLED:
            await self._end_cancelled(stored, error)

    async def _succeeded(self, stored: StoredPipeline, best: Trial | None) -> None:
        asked = stored.pipeline.model_to_upload
        if asked is None:
            await self._end(stored, PipelineState.SUCCEEDED, None)
            return
        name = stored.pipeline.name
        job = job_resource(stored.project, stored.location, stored.kind, stored.job_id)
        if stored.kind == "custom":
            spec = CustomJob.model_validate_json(stored.job_body).job_spec
            lineage = ModelLineage(training_pipeline=name, custom_job=job, run=stored.job_id)
            trial_id = ""
        else:
            tuning = HyperparameterTuningJob.model_validate_json(stored.job_body)
            spec = tuning.trial_job_spec
            if best is None:
                best = best_trial(
                    await self._tuning.get(stored.project, stored.location, stored.job_id)
                )
            if best is None:
                await self._end(
                    stored,
                    PipelineState.FAILED,
                    RpcStatus(code=9, message="the tuning job has no best trial to import"),
                )
                return
            trial_job = best.custom_job.rsplit("/", 1)[-1]
            lineage = ModelLineage(
                training_pipeline=name,
                custom_job=best.custom_job,
                hyperparameter_tuning_job=job,
                run=trial_job,
            )
            trial_id = best.id
        base = spec.base_output_directory
        if base is None:  # validation asks for one with modelToUpload
            raise RuntimeError(f"{name} has modelToUpload but its job no output directory")
        artifacts = model_dir(base.output_uri_prefix, trial_id)
        try:
            model = await self._models.import_version(
                stored.project,
                stored.location,
                asked,
                artifact_uri=artifacts,
                parent_model=stored.pipeline.parent_model,
                model_id=stored.pipeline.model_id,
                lineage=lineage,
                idempotency_key=name,
            )
        except NoModelArtifacts:
            message = f"no model artifacts in AIP_MODEL_DIR ({artifacts})"
            await self._end(stored, PipelineState.FAILED, RpcStatus(code=9, message=message))
            return
        except MldiagError as refused:
            if refused.http_status >= 500:
                raise  # the bus redelivers the fact: the import is idempotent
            failure = RpcStatus(
                code=_rpc_code(refused), message=f"importing the model: {refused.message}"
            )
            await self._end(stored, PipelineState.FAILED, failure)
            return
        log.info("pipelines.model_imported", model=model.name, version_id=model.version_id)
        await self._end(stored, PipelineState.SUCCEEDED, None, model)

    async def _end_cancelled(self, stored: StoredPipeline, error: RpcStatus | None) -> None:
        status = error or RpcStatus(code=CANCELLED_CODE, message="the pipeline was cancelled")
        await self._end(stored, PipelineState.CANCELLED, status)

    async def _end(
        self,
        stored: StoredPipeline,
        state: PipelineState,
        error: RpcStatus | None,
        model: Model | None = None,
    ) -> None:
        moved = await self._repository.move(
            stored.pipeline_id,
            _NOT_ENDED,
            state,
            datetime.now(UTC),
            error=error,
            model=model,
            model_id=model.name.rsplit("/", 1)[-1] if model is not None else None,
        )
        if moved:
            log.info("pipelines.ended", state=state.value)

    # --- restart ----------------------------------------------------------------------

    async def reconcile(self) -> None:
        """At start: create the jobs of pipelines stored without them, end the cancelled
        ones whose job never came, and catch up with jobs that moved meanwhile."""
        for stored in await self._repository.unfinished():
            with structlog.contextvars.bound_contextvars(
                pipeline_id=stored.pipeline_id, job_id=stored.job_id
            ):
                try:
                    await self._reconcile_one(stored)
                except Exception:  # one pipeline's trouble must not hold the others back
                    log.exception("pipelines.reconcile_failed")

    async def _reconcile_one(self, stored: StoredPipeline) -> None:
        if not stored.job_created:
            if stored.cancel_requested:
                await self._end_cancelled(stored, None)
                return
            try:
                await self._create_job(stored)
            except MldiagError as refused:
                if refused.http_status >= 500:
                    raise
                await self._end(
                    stored,
                    PipelineState.FAILED,
                    RpcStatus(code=_rpc_code(refused), message=refused.message),
                )
                return
        try:
            if stored.kind == "custom":
                job = await self._jobs.get(stored.project, stored.location, stored.job_id)
                state, error = job.state, job.error
            else:
                tuning = await self._tuning.get(stored.project, stored.location, stored.job_id)
                state, error = tuning.state, tuning.error
        except NotFound:
            # Deleted once it had ended, before this pipeline heard how: nothing will say.
            gone = RpcStatus(code=5, message=f"the pipeline's job {stored.job_id} was deleted")
            await self._end(stored, PipelineState.FAILED, gone)
            return
        await self._follow(stored, state, error, None)


def _invalid(field: str, problem: str) -> InvalidTrainingPipeline:
    return InvalidTrainingPipeline(
        f"{field}: {problem}", details=[{"field": field, "problem": problem}]
    )


def _not_found(project: str, location: str, pipeline_id: str) -> TrainingPipelineNotFound:
    return not_found(TrainingPipelineNotFound, pipeline_name(project, location, pipeline_id))

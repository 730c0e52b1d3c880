"""The doors of training pipelines: HTTP routes (Vertex v1 ``trainingPipelines``) and the bus
consumer that follows the jobs pipelines run.

Query parameters are accepted in camelCase and snake_case; ``enum-encoding=int`` answers
enums as numbers (``state``: PipelineState's, the model's own inside ``modelToUpload``).
"""

from typing import Annotated

import structlog
from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform import resources
from mldiag_platform.bus import Bus, ConsumerSpec, Delivery
from mldiag_platform.http import EMPTY_OBJECT
from mldiag_platform.resources import ParentDep
from mldiag_schemas import bus as subjects
from mldiag_schemas.auth import Permission
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import JobOperation
from mldiag_schemas.models import MODEL_ENUM_FIELDS
from mldiag_schemas.pipelines import (
    PIPELINE_STATE_NUMBERS,
    ListTrainingPipelinesResponse,
    TrainingPipeline,
)
from mldiag_schemas.replicas import CustomJobStateChanged
from mldiag_schemas.tuning import TuningJobStateChanged
from mldiag_training.pipelines.service import PipelinesService
from mldiag_training.pipelines.validation import parse_training_pipeline
from mldiag_training.resources import app_service, checked_id, list_query, route
from mldiag_training.vertex import EnumFields, VertexResponse

log = structlog.get_logger(__name__)

router = APIRouter()

PIPELINE_ENUM_FIELDS: EnumFields = {
    **MODEL_ENUM_FIELDS,
    "state": PIPELINE_STATE_NUMBERS,
}
"""The enums of a TrainingPipeline document (``trainingTaskInputs`` is a Struct: its
values are served as they were sent)."""

JOBS_CONSUMER: ConsumerSpec[Envelope] = ConsumerSpec(
    stream=subjects.TRAINING,
    # training.job.state_changed.<job> and training.tuning.state_changed.<job>
    subject="training.*.state_changed.*",
    durable=subjects.TRAINING_PIPELINE_JOBS_DURABLE,
    message_type=Envelope,
    # An import may take a while (it lists the model's files): small batches keep the
    # ack wait far away.
    batch_size=20,
)


def _pipeline_id(
    pipeline_id: Annotated[str, resources.id_path("The training pipeline's id (digits).")],
) -> str:
    return checked_id(pipeline_id, "pipeline_id")


PipelineIdPath = Annotated[str, Depends(_pipeline_id)]


ServiceDep = Annotated[PipelinesService, Depends(app_service("pipelines", PipelinesService))]


def _answer(
    content: TrainingPipeline | ListTrainingPipelinesResponse, request: Request
) -> Response:
    return VertexResponse(content, request, fields=PIPELINE_ENUM_FIELDS)


@route(
    router,
    "POST",
    "/trainingPipelines",
    Permission.PIPELINES_CREATE,
    body=TrainingPipeline,
    response=TrainingPipeline,
)
async def create_training_pipeline(
    request: Request, parent: ParentDep, service: ServiceDep
) -> Response:
    """Create a pipeline (QUEUED) and its job; answers the pipeline. ``trainingTaskInputs``
    is read leniently (snake_case or camelCase, numbers as doubles)."""
    body = parse_training_pipeline(await request.body())
    pipeline = await service.create(parent.project, parent.location, body)
    return _answer(pipeline, request)


@route(
    router,
    "GET",
    "/trainingPipelines",
    Permission.PIPELINES_LIST,
    response=ListTrainingPipelinesResponse,
)
async def list_training_pipelines(
    request: Request, parent: ParentDep, service: ServiceDep
) -> Response:
    """List pipelines (newest first unless ``orderBy``), filtered by ``filter`` (AIP-160:
    ``state=PIPELINE_STATE_SUCCEEDED``, ``display_name="x"``, ``labels.k=v``, ...)."""
    page = await service.list_pipelines(
        parent.project,
        parent.location,
        *list_query(request),
    )
    return _answer(page, request)


@route(
    router,
    "GET",
    "/trainingPipelines/{pipeline_id}",
    Permission.PIPELINES_GET,
    response=TrainingPipeline,
)
async def get_training_pipeline(
    request: Request, pipeline_id: PipelineIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Get one pipeline."""
    pipeline = await service.get(parent.project, parent.location, pipeline_id)
    return _answer(pipeline, request)


@route(
    router,
    "POST",
    "/trainingPipelines/{pipeline_id}:cancel",
    Permission.PIPELINES_CANCEL,
    responses=EMPTY_OBJECT,
)
async def cancel_training_pipeline(
    pipeline_id: PipelineIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Cancel a pipeline (CANCELLING, its job cancelled; CANCELLED once the job has ended);
    answers ``{}``. An ended pipeline is FAILED_PRECONDITION."""
    await service.cancel(parent.project, parent.location, pipeline_id)
    return Response(b"{}", media_type="application/json")


@route(
    router,
    "DELETE",
    "/trainingPipelines/{pipeline_id}",
    Permission.PIPELINES_DELETE,
    response=JobOperation,
)
async def delete_training_pipeline(
    request: Request, pipeline_id: PipelineIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Delete an ended pipeline (its job and model stay); answers the done operation."""
    name = await service.delete(parent.project, parent.location, pipeline_id)
    return VertexResponse(JobOperation(name=name), request)


class PipelinesBusHandler:
    """Hands the jobs' state changes to the pipelines, one at a time, with the job bound."""

    def __init__(self, service: PipelinesService) -> None:
        self._service = service

    async def on_job_states(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Apply CustomJobStateChanged and TuningJobStateChanged (jobs of no pipeline are
        skipped by the service)."""
        for delivery in deliveries:
            message = delivery.message
            with structlog.contextvars.bound_contextvars(
                subject=delivery.subject, event_id=str(message.event_id)
            ):
                if isinstance(message, CustomJobStateChanged):
                    await self._service.job_changed(message.job_id, message.state, message.error)
                elif isinstance(message, TuningJobStateChanged):
                    await self._service.job_changed(
                        message.job_id, message.state, message.error, message.best_trial
                    )


def register(bus: Bus, service: PipelinesService) -> None:
    """Add the pipelines' consumer (it starts with ``bus.start()``)."""
    bus.consume(JOBS_CONSUMER, PipelinesBusHandler(service).on_job_states)

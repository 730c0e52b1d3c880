"""The tuning room's doors: HTTP routes of hyperparameterTuningJobs (Vertex v1), the bus
consumers that feed the controller (trials' job states, trials' metric points), the
JetStream reads behind :class:`controller.MetricsFloor`, and the controller's loop.

Query parameters are accepted in camelCase and snake_case; ``enum-encoding=int`` answers
every tuning enum as its number (:data:`mldiag_schemas.tuning.TUNING_ENUM_FIELDS`).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from fastapi import APIRouter, Depends, Request, Response
from nats.js.errors import NotFoundError

from mldiag_platform.bus import Bus, ConsumerSpec, Delivery
from mldiag_platform.http import EMPTY_OBJECT
from mldiag_platform.resources import ParentDep
from mldiag_schemas import bus as subjects
from mldiag_schemas.auth import Permission
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import JobOperation
from mldiag_schemas.replicas import CustomJobStateChanged
from mldiag_schemas.telemetry import MetricPointsReceived
from mldiag_schemas.tuning import (
    TUNING_ENUM_FIELDS,
    HyperparameterTuningJob,
    ListHyperparameterTuningJobsResponse,
)
from mldiag_training.resources import JobIdPath, app_service, list_query, route
from mldiag_training.tuning.controller import TuningController
from mldiag_training.tuning.service import TuningService
from mldiag_training.tuning.validation import parse_tuning_job
from mldiag_training.vertex import VertexResponse

log = structlog.get_logger(__name__)

router = APIRouter()


ServiceDep = Annotated[TuningService, Depends(app_service("tuning", TuningService))]


def _answer(
    content: HyperparameterTuningJob | ListHyperparameterTuningJobsResponse | JobOperation,
    request: Request,
) -> Response:
    return VertexResponse(content, request, fields=TUNING_ENUM_FIELDS)


@route(
    router,
    "POST",
    "/hyperparameterTuningJobs",
    Permission.TUNING_JOBS_CREATE,
    body=HyperparameterTuningJob,
    response=HyperparameterTuningJob,
)
async def create_tuning_job(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Create a tuning job (QUEUED, RUNNING once its first trial is created); answers it.
    Output-only fields sent are ignored."""
    body = parse_tuning_job(await request.body())
    job = await service.create(parent.project, parent.location, body)
    return _answer(job, request)


@route(
    router,
    "GET",
    "/hyperparameterTuningJobs",
    Permission.TUNING_JOBS_LIST,
    response=ListHyperparameterTuningJobsResponse,
)
async def list_tuning_jobs(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """List tuning jobs with their trials (newest first unless ``orderBy``), filtered by
    ``filter`` (AIP-160, the fields of custom jobs' lists)."""
    page = await service.list_jobs(
        parent.project,
        parent.location,
        *list_query(request),
    )
    return _answer(page, request)


@route(
    router,
    "GET",
    "/hyperparameterTuningJobs/{job_id}",
    Permission.TUNING_JOBS_GET,
    response=HyperparameterTuningJob,
)
async def get_tuning_job(
    request: Request, job_id: JobIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Get one tuning job with its trials."""
    job = await service.get(parent.project, parent.location, job_id)
    return _answer(job, request)


@route(
    router,
    "POST",
    "/hyperparameterTuningJobs/{job_id}:cancel",
    Permission.TUNING_JOBS_CANCEL,
    responses=EMPTY_OBJECT,
)
async def cancel_tuning_job(job_id: JobIdPath, parent: ParentDep, service: ServiceDep) -> Response:
    """Cancel a tuning job (CANCELLING; CANCELLED once its active trials' jobs have ended);
    answers ``{}``. An ended job is FAILED_PRECONDITION."""
    await service.cancel(parent.project, parent.location, job_id)
    return Response(b"{}", media_type="application/json")


@route(
    router,
    "DELETE",
    "/hyperparameterTuningJobs/{job_id}",
    Permission.TUNING_JOBS_DELETE,
    response=JobOperation,
)
async def delete_tuning_job(
    request: Request, job_id: JobIdPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Delete an ended tuning job and its trials (their custom jobs stay); answers the done
    operation."""
    name = await service.delete(parent.project, parent.location, job_id)
    return _answer(JobOperation(name=name), request)


# --- The bus --------------------------------------------------------------------------------

TRIAL_JOBS_CONSUMER: ConsumerSpec[Envelope] = ConsumerSpec(
    stream=subjects.TRAINING,
    subject=subjects.JOB_STATE_CHANGED + ".*",
    durable=subjects.TRAINING_TRIAL_JOBS_DURABLE,
    message_type=Envelope,
    batch_size=20,
    # A trial's end creates the next trial: hand over at once rather than fill a batch.
    max_wait_seconds=0.05,
)
TRIAL_METRICS_CONSUMER: ConsumerSpec[MetricPointsReceived] = ConsumerSpec(
    stream=subjects.TELEMETRY,
    subject=subjects.METRICS_RECEIVED + ".*",
    durable=subjects.TRAINING_TRIAL_METRICS_DURABLE,
    message_type=MetricPointsReceived,
    batch_size=200,
)


class JetStreamMetricsFloor:
    """The TELEMETRY stream's sequences, as the controller's ``MetricsFloor``."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._stream = bus.namespace.stream(subjects.TELEMETRY)
        self._durable = bus.namespace.durable(subjects.TRAINING_TRIAL_METRICS_DURABLE)

    async def last_sequence(self, run_id: str) -> int | None:
        """The sequence of the run's last metric points message (None: none was sent)."""
        js = self._bus.broker.config.connection_state.stream
        subject = self._bus.namespace.subject(subjects.METRICS_RECEIVED, run_id)
        try:
            message = await js.get_last_msg(self._stream, subject)
        except NotFoundError:
            return None
        sequence: int | None = message.seq
        return sequence

    async def processed_through(self) -> int:
        """The metrics consumer's ack floor (every message up to it is settled)."""
        js = self._bus.broker.config.connection_state.stream
        info = await js.consumer_info(self._stream, self._durable, timeout=1.0)
        return int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0


class TuningBusHandler:
    """Hands trial facts to the controller with the subject bound to the log."""

    def __init__(self, controller: TuningController) -> None:
        self._controller = controller

    async def on_job_states(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Custom jobs' state changes (only trials' ends matter; the rest cost a set
        lookup, or one query the first time a job ends)."""
        for delivery in deliveries:
            message = delivery.message
            if isinstance(message, CustomJobStateChanged):
                with structlog.contextvars.bound_contextvars(
                    subject=delivery.subject, event_id=str(message.event_id)
                ):
                    await self._controller.job_state_changed(message)

    async def on_metrics(self, deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        """Metric points (only trials' runs matter)."""
        await self._controller.metrics_received([d.message for d in deliveries])


def register(bus: Bus, controller: TuningController) -> None:
    """Add the controller's consumers (they start with ``bus.start()``) and its view of the
    metrics consumer's progress."""
    handler = TuningBusHandler(controller)
    bus.consume(TRIAL_JOBS_CONSUMER, handler.on_job_states)
    bus.consume(TRIAL_METRICS_CONSUMER, handler.on_metrics)
    controller.floor = JetStreamMetricsFloor(bus)


@contextlib.asynccontextmanager
async def running(controller: TuningController) -> AsyncIterator[asyncio.Task[None]]:
    """Run the controller's loop (a reconcile of every study at once, then a pass each
    tick and on every nudge) for the lifetime of the block."""
    task = asyncio.create_task(controller.run_forever(), name="training-tuning")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

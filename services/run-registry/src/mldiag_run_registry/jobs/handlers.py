"""The consumers of training jobs' facts: each custom job's creation and state changes (one
durable over ``training.job.>``), each tuning job's (one over ``training.tuning.>``) and each
trial's end (one over ``training.trial.>``), each in the order training published them.

A fact that names a run not registered yet (a trial's end before its job's creation, which
comes on another durable) is retried until it is."""

import structlog

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_run_registry.jobs.service import JobRunsService
from mldiag_run_registry.jobs.tuning import TuningRunsService
from mldiag_schemas import bus
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_schemas.tuning import TrialEnded, TuningJobCreated, TuningJobStateChanged

log = structlog.get_logger(__name__)

JOBS_CONSUMER = ConsumerSpec(
    stream=bus.TRAINING,
    subject="training.job.>",
    durable=bus.REGISTRY_JOBS_DURABLE,
    message_type=Envelope,
    batch_size=50,
    max_wait_seconds=0.05,  # the scheduler waits for the run before it places the job
)
"""``training.job.created.<job>`` and ``training.job.state_changed.<job>``: one durable, so
a job's state never overtakes its creation."""


class JobsBusHandler:
    """Applies each job fact to the job's run, one message (one transaction) at a time."""

    def __init__(self, service: JobRunsService) -> None:
        self._service = service

    async def on_jobs(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Create runs and mirror states; facts of kinds this registry does not know (a
        newer training service's) are acknowledged and left alone."""
        for delivery in deliveries:
            message = delivery.message
            with structlog.contextvars.bound_contextvars(
                subject=delivery.subject, event_id=str(message.event_id)
            ):
                match message:
                    case CustomJobCreated():
                        await self._service.job_created(message)
                    case CustomJobStateChanged():
                        await self._service.job_state_changed(message)
                    case _:
                        log.info("job.fact_ignored", type=message.type)


TUNING_CONSUMER = ConsumerSpec(
    stream=bus.TRAINING,
    subject="training.tuning.>",
    durable=bus.REGISTRY_TUNING_DURABLE,
    message_type=Envelope,
    batch_size=50,
    max_wait_seconds=0.05,
)
"""``training.tuning.created.<job>`` and ``training.tuning.state_changed.<job>``: one durable,
so a study's state never overtakes its creation."""

TRIALS_CONSUMER = ConsumerSpec(
    stream=bus.TRAINING,
    subject="training.trial.>",
    durable=bus.REGISTRY_TRIALS_DURABLE,
    message_type=Envelope,
    batch_size=50,
    max_wait_seconds=0.05,
)
"""``training.trial.ended.<trial's job>``."""


class TuningBusHandler:
    """Applies each tuning fact to the study's run or the trial's, one message at a time."""

    def __init__(self, service: TuningRunsService) -> None:
        self._service = service

    async def on_tuning(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Create studies' runs, mirror their states and best trials, record trials' ends;
        facts of kinds this registry does not know are acknowledged and left alone."""
        for delivery in deliveries:
            message = delivery.message
            with structlog.contextvars.bound_contextvars(
                subject=delivery.subject, event_id=str(message.event_id)
            ):
                match message:
                    case TuningJobCreated():
                        await self._service.tuning_job_created(message)
                    case TuningJobStateChanged():
                        await self._service.tuning_job_state_changed(message)
                    case TrialEnded():
                        await self._service.trial_ended(message)
                    case _:
                        log.info("tuning.fact_ignored", type=message.type)

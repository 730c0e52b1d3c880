"""The consumer of custom jobs' facts: each job's creation and its state changes, in the
order the training service published them (one durable over ``training.job.>``)."""

import structlog

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_run_registry.jobs.service import JobRunsService
from mldiag_schemas import bus
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged

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

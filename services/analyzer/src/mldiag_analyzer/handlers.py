"""analyzer's bus consumers (opened events, and updates that bring new evidence): the only
module that knows about the bus."""

from mldiag_analyzer.service import AnalyzerService
from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_schemas import bus
from mldiag_schemas.events import WorkloadEventOpened, WorkloadEventUpdated

EVENTS_CONSUMER = ConsumerSpec(
    stream=bus.EVENTS,
    subject=bus.WORKLOAD_EVENT_OPENED + ".*",
    durable=bus.ANALYZER_EVENTS_DURABLE,
    message_type=WorkloadEventOpened,
    batch_size=20,
)
UPDATES_CONSUMER = ConsumerSpec(
    stream=bus.EVENTS,
    subject=bus.WORKLOAD_EVENT_UPDATED + ".*",
    durable=bus.ANALYZER_UPDATES_DURABLE,
    message_type=WorkloadEventUpdated,
    batch_size=20,
)


class BusHandlers:
    """The analyzer's handlers, bound to its service."""

    def __init__(self, service: AnalyzerService) -> None:
        self._service = service

    async def on_events(self, deliveries: list[Delivery[WorkloadEventOpened]]) -> None:
        """Analyse a batch of newly opened events (each with the run's signals)."""
        await self._service.on_opened([delivery.message for delivery in deliveries])

    async def on_updates(self, deliveries: list[Delivery[WorkloadEventUpdated]]) -> None:
        """Analyse again the updated events that bring new signals (the rest are acked)."""
        await self._service.on_updated([delivery.message for delivery in deliveries])

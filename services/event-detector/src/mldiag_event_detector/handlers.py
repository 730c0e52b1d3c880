"""event-detector's bus consumer: the only module that knows about the bus."""

from mldiag_event_detector.service import DetectorService
from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_schemas import bus
from mldiag_schemas.telemetry import MetricPointsReceived


def metrics_consumer(batch_size: int) -> ConsumerSpec[MetricPointsReceived]:
    """Every metric message ingestion accepts."""
    return ConsumerSpec(
        stream=bus.TELEMETRY,
        subject=bus.METRICS_RECEIVED + ".*",
        durable=bus.DETECTOR_METRICS_DURABLE,
        message_type=MetricPointsReceived,
        batch_size=batch_size,
    )


class BusHandlers:
    """The detector's batch handler, bound to its service."""

    def __init__(self, service: DetectorService) -> None:
        self._service = service

    async def on_metrics(self, deliveries: list[Delivery[MetricPointsReceived]]) -> None:
        """Run the rules over a batch of metric messages."""
        await self._service.on_metrics([delivery.message for delivery in deliveries])

"""event-detector's bus consumers: the only module that knows about the bus."""

from mldiag_event_detector.service import DetectorService
from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_schemas import bus
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.logs import LogLinesReceived
from mldiag_schemas.runs import RunConfigsReported
from mldiag_schemas.telemetry import MetricPointsReceived, RunHeartbeat, WorkloadSignalReported


def consumers(batch_size: int) -> list[ConsumerSpec[Envelope]]:
    """Every input of the rules: metrics, heartbeats, signals, logs, config reports, run
    facts."""
    specs: list[ConsumerSpec[Envelope]] = [
        ConsumerSpec(
            stream=bus.TELEMETRY,
            subject=bus.METRICS_RECEIVED + ".*",
            durable=bus.DETECTOR_METRICS_DURABLE,
            message_type=MetricPointsReceived,
            batch_size=batch_size,
            # Detection latency is the product: hand over what has come rather than wait.
            max_wait_seconds=0.05,
        ),
        ConsumerSpec(
            stream=bus.TELEMETRY,
            subject=bus.HEARTBEAT_RECEIVED + ".*",
            durable=bus.DETECTOR_HEARTBEATS_DURABLE,
            message_type=RunHeartbeat,
            batch_size=batch_size,
            max_wait_seconds=0.05,
        ),
        ConsumerSpec(
            stream=bus.TELEMETRY,
            subject=bus.SIGNAL_RECEIVED + ".*",
            durable=bus.DETECTOR_SIGNALS_DURABLE,
            message_type=WorkloadSignalReported,
            max_wait_seconds=0.05,
        ),
        ConsumerSpec(
            stream=bus.TELEMETRY,
            subject=bus.LOGS_RECEIVED + ".*",
            durable=bus.DETECTOR_LOGS_DURABLE,
            message_type=LogLinesReceived,
            # A batch of lines can be large (10 000 lines): fewer of them per transaction.
            batch_size=max(batch_size // 10, 1),
            max_wait_seconds=0.05,
        ),
        ConsumerSpec(
            stream=bus.TELEMETRY,
            subject=bus.CONFIGS_RECEIVED + ".*",
            durable=bus.DETECTOR_CONFIGS_DURABLE,
            message_type=RunConfigsReported,
        ),
        ConsumerSpec(
            stream=bus.RUNS,
            subject="runs.>",
            durable=bus.DETECTOR_RUNS_DURABLE,
            message_type=Envelope,
            max_wait_seconds=0.05,
        ),
    ]
    return specs


class BusHandlers:
    """The detector's batch handler, bound to its service."""

    def __init__(self, service: DetectorService) -> None:
        self._service = service

    async def on_messages(self, deliveries: list[Delivery[Envelope]]) -> None:
        """Fold a batch of messages about runs into their states."""
        await self._service.on_messages([delivery.message for delivery in deliveries])

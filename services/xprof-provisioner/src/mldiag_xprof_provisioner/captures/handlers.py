"""The bus consumer of capture commands: the only capture module that knows about the bus."""

import asyncio

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_schemas import bus
from mldiag_schemas.profiling import CaptureProfile
from mldiag_xprof_provisioner.captures.service import CaptureRunner
from mldiag_xprof_provisioner.captures.settings import CaptureSettings


def captures_consumer(settings: CaptureSettings) -> ConsumerSpec[CaptureProfile]:
    """The durable consumer of ``profiling.capture.start.<run>``.

    A pulled batch is handled (and acked) as a whole before the next pull, so a batch holds
    as many commands as may trace at once: they run side by side, each waiting for its
    targets' turn.
    """
    return ConsumerSpec(
        stream=bus.PROFILING,
        subject=bus.CAPTURE_PROFILE + ".*",
        durable=bus.PROVISIONER_CAPTURES_DURABLE,
        message_type=CaptureProfile,
        batch_size=settings.max_concurrent,
    )


class CaptureBusHandler:
    """Runs each capture command it is handed."""

    def __init__(self, runner: CaptureRunner) -> None:
        self._runner = runner

    async def on_commands(self, deliveries: list[Delivery[CaptureProfile]]) -> None:
        """Run the batch's commands concurrently; raise the first failure (a publish that
        failed) once all have ended, so that the consumer retries them one by one. Commands
        that did finish replay their recorded messages then, which JetStream drops."""
        results = await asyncio.gather(
            *(self._runner.run(delivery.message) for delivery in deliveries),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

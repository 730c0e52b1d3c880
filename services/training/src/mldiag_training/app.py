"""Assembling the training service: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import structlog
from fastapi import FastAPI

from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import connect_bus
from mldiag_platform.database import Migration, database_ok, load_migrations, open_database
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper
from mldiag_platform.storage import open_store
from mldiag_training.files import handlers as files_handlers
from mldiag_training.files.repository import FilesRepository
from mldiag_training.files.service import LogsService, PackagesService
from mldiag_training.jobs import handlers as jobs_handlers
from mldiag_training.jobs.repository import JobsRepository
from mldiag_training.jobs.service import JobsService
from mldiag_training.models import handlers as models_handlers
from mldiag_training.models.artifacts import ArtifactFiles
from mldiag_training.models.repository import ModelsRepository
from mldiag_training.models.service import ModelsService
from mldiag_training.pipelines import handlers as pipelines_handlers
from mldiag_training.pipelines.repository import PipelinesRepository
from mldiag_training.pipelines.service import PipelinesService
from mldiag_training.scheduler import handlers as scheduler_handlers
from mldiag_training.scheduler.machines import MachineTable
from mldiag_training.scheduler.repository import SchedulerRepository
from mldiag_training.scheduler.service import Scheduler
from mldiag_training.settings import TrainingSettings
from mldiag_training.tuning import handlers as tuning_handlers
from mldiag_training.tuning.controller import TuningController
from mldiag_training.tuning.repository import TuningRepository
from mldiag_training.tuning.service import TuningService
from mldiag_training.vertex import VERTEX_ERRORS

SERVICE = "training"

log = structlog.get_logger(__name__)


def _migrations() -> list[Migration]:
    """Every table the service owns: the outbox's, then its own."""
    return [*outbox_migrations(), *load_migrations("training", "mldiag_training.migrations")]


def create_app(settings: TrainingSettings | None = None) -> FastAPI:
    """Build the training app; connections open in its lifespan, not here."""
    settings = settings or TrainingSettings()
    # Read at build time, so a misread machine table stops the service before it listens.
    machines = MachineTable.from_settings(settings)
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(
                open_database(settings.database, settings.db_schema, _migrations())
            )
            bus = await stack.enter_async_context(connect_bus(settings.nats, SERVICE))
            directory = await stack.enter_async_context(open_token_directory(bus))
            outbox = Outbox(pool, bus.publisher)
            scheduler = Scheduler(
                repository=SchedulerRepository(pool, outbox),
                outbox=outbox,
                directory=directory,
                settings=settings,
                machines=machines,
            )
            jobs = JobsService(JobsRepository(pool, outbox), outbox, scheduler, machines)
            tuning_repository = TuningRepository(pool, outbox)
            tuning_controller = TuningController(
                tuning_repository,
                outbox,
                jobs,
                scheduler,
                machines,
                tick_seconds=settings.tuning_tick_seconds,
                metrics_grace_seconds=settings.tuning_metrics_grace_seconds,
                # Points held by a consumer that crashed come back after the ack wait.
                unread_metrics_seconds=settings.nats.ack_wait_seconds
                + settings.tuning_metrics_grace_seconds,
            )
            tuning = TuningService(tuning_repository, outbox, tuning_controller)
            # The registry; training pipelines import their models through it too.
            models = ModelsService(ModelsRepository(pool), ArtifactFiles(settings.storage.url))
            pipelines = PipelinesService(PipelinesRepository(pool), jobs, tuning, models, machines)

            scheduler_handlers.register(bus, scheduler)
            tuning_handlers.register(bus, tuning_controller)
            pipelines_handlers.register(bus, pipelines)
            await bus.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))
            await stack.enter_async_context(scheduler_handlers.running(scheduler))
            await stack.enter_async_context(tuning_handlers.running(tuning_controller))
            await pipelines.reconcile()  # pipelines a crash left without their job
            app.state.pipelines = pipelines
            app.state.tuning = tuning

            app.state.tokens, app.state.jobs = directory, jobs
            store = open_store(settings.storage.url)
            app.state.logs = LogsService(
                FilesRepository(pool), store, poll_seconds=settings.logs_poll_seconds
            )
            app.state.packages = PackagesService(store, settings.max_package_bytes)
            app.state.models = models
            checks.update(nats=bus.healthy, database=lambda: database_ok(pool))
            stack.callback(checks.clear)
            yield

    # Uploads get their own body limit; every other route keeps max_body_bytes.
    uploads = {files_handlers.UPLOAD_PREFIX + "/": settings.max_package_bytes}
    app = create_http_app(
        SERVICE, lifespan, checks, settings.max_body_bytes, VERTEX_ERRORS, body_limits=uploads
    )
    app.include_router(jobs_handlers.router)
    app.include_router(tuning_handlers.router)
    app.include_router(files_handlers.router)
    app.include_router(models_handlers.router)
    app.include_router(pipelines_handlers.router)
    return app

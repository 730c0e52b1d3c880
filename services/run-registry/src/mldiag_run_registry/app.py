"""Assembling run-registry: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import structlog
from fastapi import FastAPI

from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import connect_bus
from mldiag_platform.database import database_ok, load_migrations, open_database
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper
from mldiag_run_registry.events import handlers as events_handlers
from mldiag_run_registry.events.repository import EventsRepository
from mldiag_run_registry.events.service import EventsService
from mldiag_run_registry.goodput import handlers as goodput_handlers
from mldiag_run_registry.goodput.repository import GoodputRepository
from mldiag_run_registry.goodput.service import GoodputService
from mldiag_run_registry.heartbeats import handlers as heartbeats_handlers
from mldiag_run_registry.heartbeats.repository import HeartbeatsRepository
from mldiag_run_registry.heartbeats.service import HeartbeatsService
from mldiag_run_registry.metrics import handlers as metrics_handlers
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.metrics.service import MetricsService
from mldiag_run_registry.monitoring import handlers as monitoring_handlers
from mldiag_run_registry.monitoring.repository import MonitoringRepository
from mldiag_run_registry.monitoring.service import MonitoringService
from mldiag_run_registry.operations import handlers as operations_handlers
from mldiag_run_registry.operations.repository import OperationsRepository
from mldiag_run_registry.operations.service import OperationsService
from mldiag_run_registry.profiles import handlers as profiles_handlers
from mldiag_run_registry.profiles.repository import ProfilesRepository
from mldiag_run_registry.profiles.service import ProfilesService
from mldiag_run_registry.runs import handlers as runs_handlers
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_run_registry.runs.service import RunService
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_run_registry.tokens import handlers as tokens_handlers
from mldiag_run_registry.tokens.repository import TokenRepository
from mldiag_run_registry.tokens.service import TokenService

SERVICE = "run-registry"

log = structlog.get_logger(__name__)


def create_app(settings: RunRegistrySettings | None = None) -> FastAPI:
    """Build the registry app; connections open in its lifespan, not here."""
    settings = settings or RunRegistrySettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrations = [
            *outbox_migrations(),
            *load_migrations("run-registry", "mldiag_run_registry.migrations"),
            *load_migrations("run-registry-runs", "mldiag_run_registry.runs.migrations"),
            *load_migrations(
                "run-registry-operations", "mldiag_run_registry.operations.migrations"
            ),
            *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
            *load_migrations("run-registry-tokens", "mldiag_run_registry.tokens.migrations"),
            *load_migrations(
                "run-registry-heartbeats", "mldiag_run_registry.heartbeats.migrations"
            ),
            *load_migrations("run-registry-events", "mldiag_run_registry.events.migrations"),
            *load_migrations(
                "run-registry-monitoring", "mldiag_run_registry.monitoring.migrations"
            ),
            *load_migrations("run-registry-profiles", "mldiag_run_registry.profiles.migrations"),
        ]
        async with AsyncExitStack() as stack:
            pool = await stack.enter_async_context(
                open_database(settings.database, settings.db_schema, migrations)
            )
            bus = await stack.enter_async_context(connect_bus(settings.nats, SERVICE))
            directory = await stack.enter_async_context(open_token_directory(bus))
            tokens = TokenService(TokenRepository(pool), directory)
            bootstrap = settings.bootstrap_admin_token
            if bootstrap is not None and bootstrap.get_secret_value():
                await tokens.bootstrap(bootstrap.get_secret_value())
            if not await tokens.sync():
                log.warning(
                    "auth.no_usable_token",
                    hint="set MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN: every call gets 401",
                )
            outbox = Outbox(pool, bus.publisher)
            operations = OperationsRepository(pool)
            run_repository = RunRepository(pool, outbox, operations)
            runs = RunService(run_repository, outbox, artifacts_root=settings.storage.url)
            metrics = MetricsService(
                MetricsRepository(pool, settings.db_schema), runs, run_repository
            )
            events = EventsService(EventsRepository(pool), runs)
            heartbeats = HeartbeatsService(HeartbeatsRepository(pool), runs)
            goodput = GoodputService(GoodputRepository(pool), runs, events)
            monitoring = MonitoringService(MonitoringRepository(pool, outbox), outbox)
            profiles = ProfilesService(
                ProfilesRepository(pool, outbox, operations),
                runs,
                run_repository,
                outbox,
                storage_root=settings.storage.url,
                xprof_url=settings.xprof_url,
            )

            bus.consume(
                runs_handlers.CONFIGS_CONSUMER, runs_handlers.RunsBusHandler(runs).on_configs
            )
            bus.consume(
                metrics_handlers.metrics_consumer(settings.metrics_batch_size),
                metrics_handlers.MetricsBusHandler(metrics).on_metrics,
            )
            events_bus = events_handlers.EventsBusHandler(events)
            bus.consume(events_handlers.EVENTS_CONSUMER, events_bus.on_events)
            bus.consume(events_handlers.ANALYSES_CONSUMER, events_bus.on_analyses)
            bus.consume(
                heartbeats_handlers.HEARTBEATS_CONSUMER,
                heartbeats_handlers.HeartbeatsBusHandler(heartbeats).on_heartbeats,
            )
            profiles_bus = profiles_handlers.ProfilesBusHandler(profiles)
            bus.consume(
                profiles_handlers.CAPTURE_REQUESTS_CONSUMER, profiles_bus.on_capture_requests
            )
            bus.consume(profiles_handlers.SESSIONS_CONSUMER, profiles_bus.on_sessions)
            await bus.start()
            await outbox.flush()  # whatever a crash left staged
            await stack.enter_async_context(running_sweeper(outbox))

            app.state.runs, app.state.metrics, app.state.events = runs, metrics, events
            app.state.heartbeats = heartbeats
            app.state.goodput, app.state.monitoring = goodput, monitoring
            app.state.profiles = profiles
            app.state.operations = OperationsService(operations)
            app.state.tokens, app.state.tokens_service = directory, tokens
            checks.update(nats=bus.healthy, database=lambda: database_ok(pool))
            stack.callback(checks.clear)
            yield

    app = create_http_app(SERVICE, lifespan, checks)
    for router in (
        goodput_handlers.router,  # before runs: `{run_id}` would also match `x:goodput`
        runs_handlers.router,
        metrics_handlers.router,
        events_handlers.router,
        heartbeats_handlers.router,
        monitoring_handlers.router,
        profiles_handlers.router,
        operations_handlers.router,
        tokens_handlers.router,
    ):
        app.include_router(router)
    return app

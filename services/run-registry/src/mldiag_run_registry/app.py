"""Assembling run-registry: the one place its parts are wired together."""

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta

import asyncpg
import structlog
from fastapi import FastAPI

from mldiag_platform.auth import open_token_directory
from mldiag_platform.bus import Bus, connect_bus
from mldiag_platform.database import Migration, database_ok, load_migrations, open_database
from mldiag_platform.http import HealthCheck, create_http_app
from mldiag_platform.outbox import Outbox, outbox_migrations, running_sweeper
from mldiag_run_registry.console.handlers import mount_console
from mldiag_run_registry.events import handlers as events_handlers
from mldiag_run_registry.events.repository import EventsRepository
from mldiag_run_registry.events.service import EventsService
from mldiag_run_registry.goodput import handlers as goodput_handlers
from mldiag_run_registry.goodput.repository import GoodputRepository
from mldiag_run_registry.goodput.service import GoodputService
from mldiag_run_registry.heartbeats import handlers as heartbeats_handlers
from mldiag_run_registry.heartbeats.repository import HeartbeatsRepository
from mldiag_run_registry.heartbeats.service import HeartbeatsService
from mldiag_run_registry.jobs import handlers as jobs_handlers
from mldiag_run_registry.jobs.service import JobRunsService
from mldiag_run_registry.jobs.tuning import TuningRunsService
from mldiag_run_registry.live import handlers as live_handlers
from mldiag_run_registry.live.service import LiveFeed
from mldiag_run_registry.logs import handlers as logs_handlers
from mldiag_run_registry.logs.repository import LogsRepository
from mldiag_run_registry.logs.retention import LogRetention, retaining
from mldiag_run_registry.logs.service import LogsService
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
from mldiag_run_registry.profiles.captures import CapturesService
from mldiag_run_registry.profiles.deadlines import CaptureDeadlines, sweeping
from mldiag_run_registry.profiles.repository import ProfilesRepository
from mldiag_run_registry.profiles.service import ProfilesService
from mldiag_run_registry.retention import handlers as retention_handlers
from mldiag_run_registry.retention.repository import RetentionRepository
from mldiag_run_registry.retention.service import (
    RetentionService,
    RetentionSweeper,
    RunPurger,
    retention_sweeps,
)
from mldiag_run_registry.runs import handlers as runs_handlers
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_run_registry.runs.service import RunService
from mldiag_run_registry.settings import RunRegistrySettings
from mldiag_run_registry.shares import handlers as shares_handlers
from mldiag_run_registry.shares.authorizer import SharingAuthorizer
from mldiag_run_registry.shares.repository import ShareLinksRepository
from mldiag_run_registry.shares.service import ShareLinksService
from mldiag_run_registry.tokens import handlers as tokens_handlers
from mldiag_run_registry.tokens.repository import TokenRepository
from mldiag_run_registry.tokens.service import TokenService

SERVICE = "run-registry"

log = structlog.get_logger(__name__)


_ROOMS_WITH_TABLES = (
    "runs",
    "operations",
    "metrics",
    "tokens",
    "heartbeats",
    "events",
    "monitoring",
    "profiles",
    "shares",
    "logs",
    "retention",
)


def _migrations() -> list[Migration]:
    """Every table the registry owns: the outbox's, its own, then each room's, in order."""
    migrations = [
        *outbox_migrations(),
        *load_migrations("run-registry", "mldiag_run_registry.migrations"),
    ]
    for room in _ROOMS_WITH_TABLES:
        package = f"mldiag_run_registry.{room}.migrations"
        migrations += load_migrations(f"run-registry-{room}", package)
    return migrations


def _consume(
    bus: Bus,
    settings: RunRegistrySettings,
    runs: RunService,
    metrics: MetricsService,
    events: EventsService,
    heartbeats: HeartbeatsService,
    profiles: ProfilesService,
    captures: CapturesService,
    live: LiveFeed,
    run_repository: RunRepository,
    logs: LogsService,
) -> None:
    """Every durable consumer the registry runs, with its handler."""
    bus.consume(runs_handlers.CONFIGS_CONSUMER, runs_handlers.RunsBusHandler(runs).on_configs)
    bus.consume(
        metrics_handlers.metrics_consumer(settings.metrics_batch_size),
        metrics_handlers.MetricsBusHandler(metrics, live).on_metrics,
    )
    events_bus = events_handlers.EventsBusHandler(events, live)
    bus.consume(events_handlers.EVENTS_CONSUMER, events_bus.on_events)
    bus.consume(events_handlers.ANALYSES_CONSUMER, events_bus.on_analyses)
    bus.consume(
        heartbeats_handlers.HEARTBEATS_CONSUMER,
        heartbeats_handlers.HeartbeatsBusHandler(heartbeats).on_heartbeats,
    )
    profiles_bus = profiles_handlers.ProfilesBusHandler(profiles, captures)
    bus.consume(profiles_handlers.CAPTURE_REQUESTS_CONSUMER, profiles_bus.on_capture_requests)
    bus.consume(profiles_handlers.SESSIONS_CONSUMER, profiles_bus.on_sessions)
    job_runs = JobRunsService(runs, run_repository)
    jobs = jobs_handlers.JobsBusHandler(job_runs)  # a job is a run
    bus.consume(jobs_handlers.JOBS_CONSUMER, jobs.on_jobs)
    # A tuning job (a study) is a run too; each trial's end is noted on the trial's run.
    tuning = jobs_handlers.TuningBusHandler(
        TuningRunsService(job_runs, run_repository, runs, metrics)
    )
    bus.consume(jobs_handlers.TUNING_CONSUMER, tuning.on_tuning)
    bus.consume(jobs_handlers.TRIALS_CONSUMER, tuning.on_tuning)
    bus.consume(logs_handlers.LOGS_CONSUMER, logs_handlers.LogsBusHandler(logs).on_logs)


async def _sweep(
    stack: AsyncExitStack,
    settings: RunRegistrySettings,
    outbox: Outbox,
    profiles_repository: ProfilesRepository,
    captures: CapturesService,
    pool: asyncpg.Pool,
    run_repository: RunRepository,
    operations: OperationsRepository,
) -> tuple[RetentionService, RunPurger]:
    """Start the periodic work that lasts as long as ``stack``: the outbox's sweep of staged
    messages, the failing of captures nobody finished, log retention and projects' retention
    policies (whose service and purger it answers)."""
    await stack.enter_async_context(running_sweeper(outbox))
    grace = timedelta(seconds=settings.capture_grace_seconds)
    deadlines = CaptureDeadlines(profiles_repository, captures, grace)
    await stack.enter_async_context(sweeping(deadlines, settings.capture_sweep_seconds))
    retention = LogRetention(LogsRepository(pool), settings.log_retention_days)
    await stack.enter_async_context(retaining(retention, settings.log_retention_sweep_seconds))
    return await _retention(stack, settings, pool, run_repository, profiles_repository, operations)


async def _retention(
    stack: AsyncExitStack,
    settings: RunRegistrySettings,
    pool: asyncpg.Pool,
    run_repository: RunRepository,
    profiles_repository: ProfilesRepository,
    operations: OperationsRepository,
) -> tuple[RetentionService, RunPurger]:
    """The retention policies, the purge of deleted runs, and their sweep for as long as
    ``stack`` lasts."""
    repository = RetentionRepository(pool)
    policies = RetentionService(repository, settings.retention_deleted_runs_days)
    metrics = MetricsRepository(pool, settings.db_schema)
    purger = RunPurger(
        run_repository,
        metrics,
        EventsRepository(pool),
        LogRetention(LogsRepository(pool), settings.log_retention_days),
        profiles_repository,
        HeartbeatsRepository(pool),
        operations,
    )
    sweeper = RetentionSweeper(policies, repository, run_repository, metrics, purger)
    await stack.enter_async_context(retention_sweeps(sweeper, settings.retention_sweep_seconds))
    return policies, purger


def create_app(settings: RunRegistrySettings | None = None) -> FastAPI:
    """Build the registry app; connections open in its lifespan, not here."""
    settings = settings or RunRegistrySettings()
    checks: dict[str, HealthCheck] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        migrations = _migrations()
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
            live = LiveFeed(bus)
            await live.start()
            stack.push_async_callback(live.stop)
            outbox = Outbox(pool, bus.publisher)
            operations = OperationsRepository(pool)
            run_repository = RunRepository(pool, outbox, operations)
            runs = RunService(run_repository, outbox, artifacts_root=settings.storage.url)
            metrics = MetricsService(
                # one instance: goodput reads raw points through it too
                metrics_repository := MetricsRepository(pool, settings.db_schema),
                runs,
                run_repository,
                finder=run_repository,  # each run's project, for its points' partitions
            )
            events = EventsService(EventsRepository(pool), runs)
            logs = LogsService(LogsRepository(pool), runs)
            heartbeats = HeartbeatsService(HeartbeatsRepository(pool), runs)
            goodput = GoodputService(GoodputRepository(pool, metrics_repository), runs, events)
            monitoring = MonitoringService(MonitoringRepository(pool, outbox), outbox)
            profiles_repository = ProfilesRepository(pool, outbox, operations)
            profiles = ProfilesService(
                profiles_repository,
                runs,
                run_repository,
                outbox,
                storage_root=settings.storage.url,
                xprof_url=settings.xprof_url,
            )
            captures = CapturesService(
                profiles_repository, runs, outbox, profiles, storage_root=settings.storage.url
            )

            key = settings.share_link_key
            shares = ShareLinksService(
                ShareLinksRepository(pool),
                runs,
                events,
                profiles,
                signing_key=key.get_secret_value().encode() if key is not None else None,
            )
            await shares.start()

            _consume(
                bus,
                settings,
                runs,
                metrics,
                events,
                heartbeats,
                profiles,
                captures,
                live,
                run_repository,
                logs,
            )
            await bus.start()
            await outbox.flush()  # whatever a crash left staged
            app.state.retention, app.state.purger = await _sweep(
                stack,
                settings,
                outbox,
                profiles_repository,
                captures,
                pool,
                run_repository,
                operations,
            )

            app.state.runs, app.state.metrics, app.state.events = runs, metrics, events
            app.state.heartbeats, app.state.goodput, app.state.monitoring, app.state.logs = (
                heartbeats,
                goodput,
                monitoring,
                logs,
            )
            app.state.profiles, app.state.captures = profiles, captures
            app.state.operations = OperationsService(operations)
            app.state.tokens_service, app.state.tokens = (
                tokens,
                SharingAuthorizer(directory, shares),
            )
            app.state.shares, app.state.live, app.state.public_url = (
                shares,
                live,
                settings.public_url,
            )
            checks.update(nats=bus.healthy, database=lambda: database_ok(pool))
            stack.callback(checks.clear)
            yield

    app = create_http_app(SERVICE, lifespan, checks, settings.max_body_bytes)
    for router in (
        goodput_handlers.router,  # before runs: `{run_id}` would also match `x:goodput`
        live_handlers.router,  # and `x:watch`
        retention_handlers.router,
        runs_handlers.router,
        metrics_handlers.router,
        events_handlers.router,
        logs_handlers.router,
        heartbeats_handlers.router,
        monitoring_handlers.router,
        profiles_handlers.router,
        operations_handlers.router,
        tokens_handlers.router,
        shares_handlers.router,
    ):
        app.include_router(router)
    mount_console(app, settings.console_dir)
    return app

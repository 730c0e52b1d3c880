"""Retention: per-project policies, the background sweep that applies them, and the purge
of runs deleted for good (no SQL, no HTTP here).

What goes when (docs/retention.md):

* raw metric points: whole storage weeks of the project, once their newest day is older
  than ``rawPointsDays`` (metrics/ drops the partitions; nothing is deleted row by row);
* a run's metric data (rollups, series, latest values and averages): once the run ended more
  than ``rollupsDays`` ago;
* a run deleted more than ``deletedRunsDays`` ago: purged, everything recorded against it
  and then the run itself.

Log lines follow the registry-wide ``log_retention_days`` (logs/retention.py), which this
module does not replace; a purge removes a run's logs with the rest.

A purge removes the run's row last, so a purge that fails half way leaves a deleted run
that the next purge (a sweep, or the API) finishes; every step is idempotent. Two replicas
never sweep together (an advisory lock), and their work would be idempotent if they did.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Protocol
from urllib.parse import urlparse

import structlog
from pydantic import ValidationError
from pydantic.alias_generators import to_camel, to_snake

from mldiag_platform.periodic import periodically
from mldiag_platform.storage import ObjectStore, open_store
from mldiag_run_registry.events.repository import EventsRepository
from mldiag_run_registry.heartbeats.repository import HeartbeatsRepository
from mldiag_run_registry.logs.retention import LogRetention
from mldiag_run_registry.operations.repository import OperationsRepository
from mldiag_run_registry.profiles.repository import ProfilesRepository, StoredFiles
from mldiag_run_registry.retention.errors import InvalidRetentionPolicy, RunNotDeleted
from mldiag_run_registry.retention.repository import RetentionRepository, StoredPolicy
from mldiag_run_registry.runs.errors import InvalidUpdateMask, RunNotFound
from mldiag_run_registry.runs.repository import RunRepository
from mldiag_run_registry.runs.service import check_run_id
from mldiag_schemas.ids import run_name
from mldiag_schemas.retention import PurgedRun, RetentionPolicy, UpdateRetentionPolicyRequest

log = structlog.get_logger(__name__)

_EPOCH = date(1970, 1, 1)
_POLICY_FIELDS = ("raw_points_days", "rollups_days", "deleted_runs_days")

LEDGER_DAYS = 30
"""Days the ids of stored point messages are kept: well past the oldest redelivery or
replay the TELEMETRY stream allows (its messages live 7 days), so a replay stores nothing."""

SWEEP_BATCH = 100
"""Runs expired or purged per project and pass: a first pass over years of runs stays
short, and the next pass goes on."""


class MetricRetention(Protocol):
    """What metric storage offers retention (metrics/repository.py)."""

    async def expire_points(self, project: str, before_day: int) -> int:
        """Drop the project's point partitions that end on or before ``before_day`` (days
        since 1970-01-01, UTC); how many were dropped."""
        ...

    async def purge_run(self, run_id: str) -> int:
        """Remove every point, rollup and series of the run; points removed."""
        ...

    async def projects_with_points(self) -> list[str]:
        """Every project with stored points."""
        ...

    async def compact_chunks(self, project: str) -> int:
        """Merge the project's small point chunks (live runs' few points per batch) into
        full ones; how many were merged away."""
        ...

    async def prune_ledger(self, stored_before: datetime) -> int:
        """Forget the ids of point messages stored before ``stored_before``; how many."""
        ...


def day_number(moment: datetime) -> int:
    """Days since 1970-01-01 of ``moment``'s UTC date (the day metric storage files a
    point under)."""
    return (moment.astimezone(UTC).date() - _EPOCH).days


def policy_name(project: str, location: str) -> str:
    """``projects/{p}/locations/{l}/retentionPolicy``."""
    return f"projects/{project}/locations/{location}/retentionPolicy"


def _mask_paths(text: str | None, body: UpdateRetentionPolicyRequest) -> list[str]:
    """The snake_case fields a PATCH sets: the mask's, or those sent."""
    if text is None or not text.strip():
        return [name for name in _POLICY_FIELDS if name in body.model_fields_set]
    paths: list[str] = []
    for raw in text.split(","):
        path = raw.strip()
        names = list(_POLICY_FIELDS) if path == "*" else [to_snake(path)]
        for name in names:
            if name not in _POLICY_FIELDS:
                allowed = ", ".join(to_camel(field) for field in _POLICY_FIELDS)
                raise InvalidUpdateMask(
                    f"updateMask names {path!r}, which cannot be set (settable: {allowed})"
                )
            if name not in paths:
                paths.append(name)
    return paths


class RetentionService:
    """The policy resource: one per project, defaults where none was set."""

    def __init__(self, repository: RetentionRepository, default_deleted_runs_days: int) -> None:
        self._repository = repository
        self._default_deleted_runs_days = default_deleted_runs_days

    def default_policy(self, project: str) -> StoredPolicy:
        """The policy of a project that never set one (keeps every point and rollup)."""
        return StoredPolicy(
            project, 0, 0, self._default_deleted_runs_days, datetime.min.replace(tzinfo=UTC)
        )

    async def policy_of(self, project: str) -> StoredPolicy:
        """The project's policy, stored or default."""
        return await self._repository.get_policy(project) or self.default_policy(project)

    async def stored_policies(self) -> dict[str, StoredPolicy]:
        """Every project's stored policy."""
        return {policy.project: policy for policy in await self._repository.list_policies()}

    async def get_policy(self, project: str, location: str) -> RetentionPolicy:
        """The policy as the API shows it."""
        stored = await self._repository.get_policy(project)
        return _resource(
            stored or self.default_policy(project), location, stored=stored is not None
        )

    async def update_policy(
        self,
        project: str,
        location: str,
        body: UpdateRetentionPolicyRequest,
        update_mask: str | None,
    ) -> RetentionPolicy:
        """Set the masked fields (a masked field absent from the body: its default)."""
        paths = _mask_paths(update_mask, body)
        current = await self.policy_of(project)
        defaults = self.default_policy(project)
        values = {name: getattr(current, name) for name in _POLICY_FIELDS}
        for name in paths:
            sent = getattr(body, name)
            values[name] = getattr(defaults, name) if sent is None else sent
        try:
            checked = RetentionPolicy.model_validate(values)
        except ValidationError as error:
            details = [
                {"field": ".".join(str(p) for p in problem["loc"]), "problem": problem["msg"]}
                for problem in error.errors()[:10]
            ]
            message = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise InvalidRetentionPolicy(message, details=details) from None
        stored = StoredPolicy(
            project,
            checked.raw_points_days,
            checked.rollups_days,
            checked.deleted_runs_days,
            datetime.now(UTC),
        )
        await self._repository.put_policy(stored)
        log.info(
            "retention.policy_updated",
            project=project,
            mask=",".join(to_camel(path) for path in paths),
            raw_points_days=stored.raw_points_days,
            rollups_days=stored.rollups_days,
            deleted_runs_days=stored.deleted_runs_days,
        )
        return _resource(stored, location, stored=True)


def _resource(policy: StoredPolicy, location: str, *, stored: bool) -> RetentionPolicy:
    return RetentionPolicy(
        name=policy_name(policy.project, location),
        raw_points_days=policy.raw_points_days,
        rollups_days=policy.rollups_days,
        deleted_runs_days=policy.deleted_runs_days,
        update_time=policy.update_time if stored else None,
    )


# --- purge ----------------------------------------------------------------------------------


def _path_of(uri: str) -> str:
    parsed = urlparse(uri)
    return (parsed.netloc + parsed.path).rstrip("/")


class RunPurger:
    """Removes a deleted run and everything recorded against it, for good."""

    def __init__(
        self,
        runs: RunRepository,
        metrics: MetricRetention,
        events: EventsRepository,
        logs: LogRetention,
        profiles: ProfilesRepository,
        heartbeats: HeartbeatsRepository,
        operations: OperationsRepository,
        *,
        stores: Callable[[str], ObjectStore] = open_store,
    ) -> None:
        self._runs = runs
        self._metrics = metrics
        self._events = events
        self._logs = logs
        self._profiles = profiles
        self._heartbeats = heartbeats
        self._operations = operations
        self._stores = stores

    async def purge_deleted(self, project: str, location: str, run_id: str) -> PurgedRun:
        """Purge a run of that parent now: :class:`RunNotFound` if there is none (or it was
        purged already), :class:`RunNotDeleted` if it is live."""
        check_run_id(run_id)
        run = await self._runs.get_run(project, location, run_id, include_deleted=True)
        if run is None:
            raise RunNotFound(f"run {run_name(project, location, run_id)!r} not found")
        if run.delete_time is None:
            raise RunNotDeleted(
                f"run {run.name!r} is live: delete it first (a deleted run is purged for good;"
                " a live one never is)"
            )
        purged = await self.purge(run_id)
        return purged or PurgedRun(name=run.name)  # a concurrent purge finished it first

    async def purge(self, run_id: str) -> PurgedRun | None:
        """Purge the deleted run ``run_id``; None if it is gone already. The run's row goes
        last, so a purge interrupted anywhere is finished by the next one."""
        found = await self._runs.find_run(run_id)
        if found is None:
            return None
        project, location, run = found
        if run.delete_time is None:
            raise RunNotDeleted(f"run {run.name!r} is live: only deleted runs are purged")
        objects = 0
        for files in await self._profiles.stored_files(run_id):
            objects += await self._remove_files(run_id, files)
        sessions, targets = await self._profiles.purge_run(run_id)
        metric_points = await self._metrics.purge_run(run_id)
        events, analyses = await self._events.purge_run(run_id)
        log_chunks = await self._logs.purge_run(run_id)
        heartbeats = await self._heartbeats.purge_run(run_id)
        operations = await self._operations.purge_target(project, location, run.name)
        await self._runs.delete_deleted_run(run_id)
        purged = PurgedRun(
            name=run.name,
            metric_points=metric_points,
            events=events,
            analyses=analyses,
            log_chunks=log_chunks,
            profiler_sessions=sessions,
            profiler_targets=targets,
            objects=objects,
            heartbeats=heartbeats,
            operations=operations,
        )
        log.info(
            "run.purged",
            run_id=run_id,
            project=project,
            location=location,
            **purged.model_dump(exclude={"name"}),
        )
        return purged

    async def _remove_files(self, run_id: str, files: StoredFiles) -> int:
        """Remove a session's files: everything in its folder, and each host's file. Only
        URIs inside the run's own profile folder are touched, whatever a report claimed: a
        session whose folder were a bucket's root must not empty the bucket."""
        removed = 0
        inside = f"/{run_id}/plugins/profile/"
        folder = files.folder_uri.rstrip("/")
        emptied = bool(folder) and _path_of(folder).endswith(f"{inside}{files.session_id}")
        if emptied:
            store = self._stores(folder)
            for key in await store.list():
                await store.delete(key)
                removed += 1
        elif folder:
            log.warning("run.purge_skipped_folder", run_id=run_id, folder=folder)
        for uri in files.file_uris:
            if emptied and uri.startswith(folder + "/"):
                continue  # gone with the folder
            parent, _, name = uri.rpartition("/")
            if inside not in _path_of(uri) or not name:
                log.warning("run.purge_skipped_file", run_id=run_id, file=uri)
                continue
            store = self._stores(parent)
            if name in await store.list(name):
                await store.delete(name)
                removed += 1
        return removed


# --- the sweep --------------------------------------------------------------------------------


@dataclass
class SweepSummary:
    """What one pass removed."""

    projects: int = 0
    partitions_dropped: int = 0
    runs_expired: int = 0
    runs_purged: int = 0
    chunks_compacted: int = 0
    ledger_pruned: int = 0
    failed_projects: list[str] = field(default_factory=list)
    skipped: bool = False
    """Another replica held the sweep: this one did nothing."""


class RetentionSweeper:
    """Applies every project's policy: drops old point partitions, expires the metric data
    of runs that ended long ago, purges runs deleted long ago."""

    def __init__(
        self,
        policies: RetentionService,
        repository: RetentionRepository,
        runs: RunRepository,
        metrics: MetricRetention,
        purger: RunPurger,
        *,
        batch: int = SWEEP_BATCH,
        ledger_days: int = LEDGER_DAYS,
    ) -> None:
        self._policies = policies
        self._ledger_age = timedelta(days=ledger_days)
        self._repository = repository
        self._runs = runs
        self._metrics = metrics
        self._purger = purger
        self._batch = batch

    async def sweep(self, now: datetime | None = None) -> SweepSummary:
        """One pass over every project with a policy or a deleted run, as of ``now``."""
        now = now or datetime.now(UTC)
        started = time.perf_counter()
        summary = SweepSummary()
        async with self._repository.sweeping_alone() as alone:
            if not alone:
                summary.skipped = True
                log.info("retention.sweep_skipped", reason="another replica is sweeping")
                return summary
            stored = await self._policies.stored_policies()
            projects = sorted(
                set(stored)
                | set(await self._runs.projects_with_deleted_runs())
                | set(await self._metrics.projects_with_points())  # for compaction
            )
            for project in projects:
                policy = stored.get(project) or self._policies.default_policy(project)
                try:
                    await self._apply(policy, now, summary)
                except Exception as error:  # one project's failure never stops the others
                    summary.failed_projects.append(project)
                    log.warning(
                        "retention.project_failed",
                        project=project,
                        error=repr(error),
                        exc_info=True,
                    )
                summary.projects += 1
            summary.ledger_pruned = await self._metrics.prune_ledger(now - self._ledger_age)
        log.info(
            "retention.swept",
            projects=summary.projects,
            partitions_dropped=summary.partitions_dropped,
            runs_expired=summary.runs_expired,
            runs_purged=summary.runs_purged,
            chunks_compacted=summary.chunks_compacted,
            ledger_pruned=summary.ledger_pruned,
            failed_projects=summary.failed_projects,
            seconds=round(time.perf_counter() - started, 3),
        )
        return summary

    async def _apply(self, policy: StoredPolicy, now: datetime, summary: SweepSummary) -> None:
        project = policy.project
        if policy.raw_points_days > 0:
            before_day = day_number(now) - policy.raw_points_days
            summary.partitions_dropped += await self._metrics.expire_points(project, before_day)
        summary.chunks_compacted += await self._metrics.compact_chunks(project)
        if policy.rollups_days > 0:
            cutoff = now - timedelta(days=policy.rollups_days)
            for run_id in await self._runs.ended_unexpired_before(project, cutoff, self._batch):
                await self._metrics.purge_run(run_id)
                await self._runs.mark_metrics_expired(run_id, now)
                summary.runs_expired += 1
        if policy.deleted_runs_days > 0:
            cutoff = now - timedelta(days=policy.deleted_runs_days)
            for run_id in await self._runs.deleted_before(project, cutoff, self._batch):
                if await self._purger.purge(run_id) is not None:
                    summary.runs_purged += 1


def retention_sweeps(
    sweeper: RetentionSweeper, every_seconds: float
) -> contextlib.AbstractAsyncContextManager[asyncio.Task[None]]:
    """Sweep every ``every_seconds`` (the first one interval after start, not while the
    registry is busy starting) for as long as the block runs; a failed pass is logged and
    tried again at the next tick."""
    return periodically(
        sweeper.sweep, every_seconds, name="retention", failed="retention.sweep_failed"
    )

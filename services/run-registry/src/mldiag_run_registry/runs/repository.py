"""All SQL about runs. Each public write is one transaction that also records its operation
and stages its bus messages in the outbox.
"""

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import asyncpg

from mldiag_platform.listing.filtering import Expr, OrderKey
from mldiag_platform.listing.sql import keyset_sql, order_sql, where_sql
from mldiag_platform.outbox import Outbox
from mldiag_run_registry.operations.repository import OperationsRepository
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import run_name
from mldiag_schemas.monitoring import MonitoringRules
from mldiag_schemas.operations import Operation
from mldiag_schemas.runs import (
    Artifacts,
    Configs,
    ErrorDetails,
    Orchestrator,
    Run,
    RunMetricsSummary,
    RunPhase,
    RunState,
    WorkloadDetails,
)

_COLUMNS = (
    "run_id",
    "project",
    "location",
    "display_name",
    "run_set",
    "labels",
    "state",
    "create_time",
    "update_time",
    "configs",
    "artifacts",
    "orchestrator",
    "workload_details",
    "error_details",
    "etag",
    "end_time",
    "delete_time",
    "workload_id",
    "logical_id",
    "cluster_id",
    "creator",
    "metrics_summary",
    "monitoring",
)
_SELECT = ", ".join(_COLUMNS)
_JSONB = {
    "labels",
    "artifacts",
    "workload_details",
    "error_details",
    "metrics_summary",
    "monitoring",
}
_PLACEHOLDERS = ", ".join(
    f"${i}::jsonb" if name in _JSONB else f"${i}" for i, name in enumerate(_COLUMNS, start=1)
)
# Maintained by the metrics part of the registry (set_metrics_summary), never by an update.
_OUTPUT_ONLY = frozenset({"metrics_summary"})
_UPDATED = tuple(name for name in _COLUMNS if name not in _OUTPUT_ONLY)
# Every updated column but the key and the parent, for a full-row update ($1..$3 identify it).
_SET = ", ".join(
    f"{name} = ${i}::jsonb" if name in _JSONB else f"{name} = ${i}"
    for i, name in enumerate(_UPDATED, start=1)
    if i > 3
)

# Filter and orderBy fields (see runs.service.FIELDS) → SQL expressions.
_FIELD_COLUMNS = {
    "runId": "run_id",
    "displayName": "display_name",
    "runSet": "run_set",
    "state": "state",
    "runPhase": "state",
    "orchestrator": "orchestrator",
    "createTime": "create_time",
    "updateTime": "update_time",
    "workloadId": "workload_id",
    "labels": "labels",  # JSONB: filtered by key, never ordered
}


def _run_from(row: asyncpg.Record) -> Run:
    state = RunState(row["state"])
    error = json.loads(row["error_details"]) if row["error_details"] else None
    return Run(
        name=run_name(row["project"], row["location"], row["run_id"]),
        run_id=row["run_id"],
        display_name=row["display_name"],
        run_set=row["run_set"],
        labels=json.loads(row["labels"]),
        configs=Configs.model_validate_json(row["configs"]),
        artifacts=Artifacts.model_validate_json(row["artifacts"]),
        orchestrator=Orchestrator(row["orchestrator"]),
        workload_details=WorkloadDetails.model_validate_json(row["workload_details"]),
        run_phase=RunPhase.of(state),
        state=state,
        etag=row["etag"],
        create_time=row["create_time"],
        update_time=row["update_time"],
        end_time=row["end_time"],
        delete_time=row["delete_time"],
        error_details=ErrorDetails.model_validate(error) if error else None,
        workload_id=row["workload_id"],
        logical_id=row["logical_id"],
        cluster_id=row["cluster_id"],
        creator=row["creator"],
        metrics=RunMetricsSummary.model_validate_json(row["metrics_summary"]),
        monitoring=MonitoringRules.model_validate_json(row["monitoring"]),
    )


def _values(project: str, location: str, run: Run) -> tuple[object, ...]:
    return (
        run.run_id,
        project,
        location,
        run.display_name,
        run.run_set,
        json.dumps(run.labels),
        run.state.value,
        run.create_time,
        run.update_time,
        run.configs.model_dump_json(),  # text: NaN survives
        run.artifacts.model_dump_json(),
        run.orchestrator.value,
        run.workload_details.model_dump_json(),
        run.error_details.model_dump_json() if run.error_details else None,
        run.etag,
        run.end_time,
        run.delete_time,
        run.workload_id,
        run.logical_id,
        run.cluster_id,
        run.creator,
        run.metrics.model_dump_json(),
        run.monitoring.model_dump_json(),
    )


def _sql_value(field: str, value: object) -> object:
    if field == "runPhase" and isinstance(value, str):
        return RunPhase(value).state.value
    return value


class RunRepository:
    """Runs in the registry's own schema. Deleted runs (``delete_time`` set) are kept but
    never returned by the reads that serve the API.
    """

    def __init__(
        self, pool: asyncpg.Pool, outbox: Outbox, operations: OperationsRepository | None = None
    ) -> None:
        self._pool = pool
        self._outbox = outbox
        # Every write records its operation in the same transaction, on the same pool.
        self._operations = operations or OperationsRepository(pool)

    async def insert_run(
        self,
        project: str,
        location: str,
        run: Run,
        operation: Operation,
        announce: Sequence[Envelope],
    ) -> bool:
        """Insert ``run``, record ``operation`` and stage ``announce``; False (and nothing
        written) if the id or the logical id is taken, deleted runs included.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            # No conflict target: a taken run id and a taken logical id both mean "exists".
            inserted = await conn.fetchval(
                f"INSERT INTO runs ({_SELECT}) VALUES ({_PLACEHOLDERS})"
                " ON CONFLICT DO NOTHING RETURNING true",
                *_values(project, location, run),
            )
            if not inserted:
                return False
            await self._operations.add(conn, project, location, operation)
            await self._outbox.add(conn, announce)
        return True

    async def replace_run(
        self,
        project: str,
        location: str,
        run: Run,
        expected_etag: str,
        operation: Operation,
        announce: Sequence[Envelope],
    ) -> Literal["replaced", "stale", "conflict"]:
        """Overwrite the live run with ``run`` if its etag is still ``expected_etag``.

        ``stale`` (nothing written) when someone changed or deleted it meanwhile;
        ``conflict`` when its new logical id belongs to another run.
        """
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                values = [
                    value
                    for name, value in zip(_COLUMNS, _values(project, location, run), strict=True)
                    if name not in _OUTPUT_ONLY
                ]
                replaced = await conn.fetchval(
                    f"UPDATE runs SET {_SET}"
                    " WHERE run_id = $1 AND project = $2 AND location = $3"
                    f" AND delete_time IS NULL AND etag = ${len(values) + 1} RETURNING true",
                    *values,
                    expected_etag,
                )
                if not replaced:
                    return "stale"
                await self._operations.add(conn, project, location, operation)
                await self._outbox.add(conn, announce)
        except asyncpg.UniqueViolationError:  # runs_by_logical_id
            return "conflict"
        return "replaced"

    async def set_metrics_summary(self, run_id: str, summary: RunMetricsSummary) -> None:
        """Store the run's output-only metric averages (no new etag: nobody wrote the run)."""
        await self._pool.execute(
            "UPDATE runs SET metrics_summary = $2::jsonb WHERE run_id = $1",
            run_id,
            summary.model_dump_json(),
        )

    async def get_run(
        self, project: str, location: str, run_id: str, *, include_deleted: bool = False
    ) -> Run | None:
        """The run, if it exists under that parent (and is not deleted, unless asked)."""
        row = await self._pool.fetchrow(
            f"SELECT {_SELECT} FROM runs WHERE run_id = $1 AND project = $2 AND location = $3"
            + ("" if include_deleted else " AND delete_time IS NULL"),
            run_id,
            project,
            location,
        )
        return _run_from(row) if row else None

    async def find_run(self, run_id: str) -> tuple[str, str, Run] | None:
        """(project, location, run) of the run with that id under any parent, deleted or
        not: run ids are unique across parents.
        """
        row = await self._pool.fetchrow(f"SELECT {_SELECT} FROM runs WHERE run_id = $1", run_id)
        return (row["project"], row["location"], _run_from(row)) if row else None

    async def find_by_logical_id(self, project: str, location: str, logical_id: str) -> Run | None:
        """The run upserted on ``logical_id``, deleted or not."""
        row = await self._pool.fetchrow(
            f"SELECT {_SELECT} FROM runs WHERE project = $1 AND location = $2 AND logical_id = $3",
            project,
            location,
            logical_id,
        )
        return _run_from(row) if row else None

    async def list_runs(
        self,
        project: str,
        location: str,
        where: Expr | None,
        order: Sequence[OrderKey],
        limit: int,
        after: Sequence[object] | None,
    ) -> list[Run]:
        """Live runs matching ``where`` in ``order`` (which must end on a unique key),
        starting after the keyset position ``after`` (one value per order key).
        """
        params: list[object] = [project, location]
        clauses = ["project = $1", "location = $2", "delete_time IS NULL"]
        if where is not None:
            clauses.append(
                where_sql(where, params, _FIELD_COLUMNS, empty_is_unset=True, value=_sql_value)
            )
        if after is not None:
            clauses.append(keyset_sql(order, after, params, _FIELD_COLUMNS, value=_sql_value))
        params.append(limit)
        rows = await self._pool.fetch(
            f"SELECT {_SELECT} FROM runs WHERE {' AND '.join(clauses)}"
            f" ORDER BY {order_sql(order, _FIELD_COLUMNS)} LIMIT ${len(params)}",
            *params,
        )
        return [_run_from(row) for row in rows]

    # --- retention (retention/ drives these) ------------------------------------------------

    async def projects_with_deleted_runs(self) -> list[str]:
        """Every project holding a soft-deleted run (a short read of a partial index)."""
        rows = await self._pool.fetch(
            "SELECT DISTINCT project FROM runs WHERE delete_time IS NOT NULL ORDER BY project"
        )
        return [row["project"] for row in rows]

    async def deleted_before(self, project: str, cutoff: datetime, limit: int) -> list[str]:
        """Ids of up to ``limit`` runs of ``project`` soft-deleted before ``cutoff``, oldest
        deletion first."""
        rows = await self._pool.fetch(
            "SELECT run_id FROM runs WHERE project = $1 AND delete_time IS NOT NULL"
            " AND delete_time < $2 ORDER BY delete_time, run_id LIMIT $3",
            project,
            cutoff,
            limit,
        )
        return [row["run_id"] for row in rows]

    async def ended_unexpired_before(self, project: str, cutoff: datetime, limit: int) -> list[str]:
        """Ids of up to ``limit`` runs of ``project`` that ended before ``cutoff`` and whose
        metric data was not expired yet, earliest end first (deleted runs included: their
        metric data goes the same way until they are purged)."""
        rows = await self._pool.fetch(
            "SELECT run_id FROM runs WHERE project = $1 AND end_time IS NOT NULL"
            " AND metrics_expire_time IS NULL AND end_time < $2"
            " ORDER BY end_time, run_id LIMIT $3",
            project,
            cutoff,
            limit,
        )
        return [row["run_id"] for row in rows]

    async def mark_metrics_expired(self, run_id: str, now: datetime) -> None:
        """Note that the run's metric data was expired (the sweeper skips it from now on);
        its output-only metric averages go with it."""
        await self._pool.execute(
            "UPDATE runs SET metrics_expire_time = $2, metrics_summary = '{}'::jsonb"
            " WHERE run_id = $1",
            run_id,
            now,
        )

    async def delete_deleted_run(self, run_id: str) -> bool:
        """Remove the row of a soft-deleted run for good (the last step of a purge: until
        then a crashed purge can be run again); False if there was none. A live run is
        never removed here."""
        deleted = await self._pool.fetchval(
            "DELETE FROM runs WHERE run_id = $1 AND delete_time IS NOT NULL RETURNING true",
            run_id,
        )
        return bool(deleted)

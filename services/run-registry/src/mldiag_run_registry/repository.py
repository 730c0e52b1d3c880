"""All of run-registry's SQL. Each public method is one transaction."""

import json
from collections.abc import Sequence
from datetime import datetime

import asyncpg

from mldiag_platform.outbox import Outbox
from mldiag_schemas.analyses import Analysis
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.events import WorkloadEvent
from mldiag_schemas.ids import run_name
from mldiag_schemas.runs import Run, RunState
from mldiag_schemas.telemetry import MetricPointsReceived, MetricSummary, SeriesPoint

_RUN_COLUMNS = (
    "run_id, project, location, display_name, run_set, labels, state, create_time, update_time"
)


def _run_from(row: asyncpg.Record) -> Run:
    return Run(
        name=run_name(row["project"], row["location"], row["run_id"]),
        run_id=row["run_id"],
        display_name=row["display_name"],
        run_set=row["run_set"],
        labels=json.loads(row["labels"]),
        state=RunState(row["state"]),
        create_time=row["create_time"],
        update_time=row["update_time"],
    )


class RunRepository:
    """Runs, metric points, events and analyses in the registry's own schema."""

    def __init__(self, pool: asyncpg.Pool, outbox: Outbox, schema: str) -> None:
        self._pool = pool
        self._outbox = outbox
        self._schema = schema

    async def insert_run(
        self, project: str, location: str, run: Run, announce: Sequence[Envelope]
    ) -> bool:
        """Insert ``run`` and stage ``announce``; False (and nothing staged) if it exists."""
        async with self._pool.acquire() as conn, conn.transaction():
            inserted = await conn.fetchval(
                f"INSERT INTO runs ({_RUN_COLUMNS})"
                " VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)"
                " ON CONFLICT (run_id) DO NOTHING RETURNING true",
                run.run_id,
                project,
                location,
                run.display_name,
                run.run_set,
                json.dumps(run.labels),
                run.state.value,
                run.create_time,
                run.update_time,
            )
            if not inserted:
                return False
            await self._outbox.add(conn, announce)
        return True

    async def get_run(self, project: str, location: str, run_id: str) -> Run | None:
        """The run, if it exists under that parent."""
        row = await self._pool.fetchrow(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = $1 AND project = $2 AND location = $3",
            run_id,
            project,
            location,
        )
        return _run_from(row) if row else None

    async def list_runs(
        self, project: str, location: str, limit: int, after: tuple[datetime, str] | None
    ) -> list[Run]:
        """Runs newest first, starting after the keyset position ``after``."""
        if after is None:
            rows = await self._pool.fetch(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE project = $1 AND location = $2"
                " ORDER BY create_time DESC, run_id DESC LIMIT $3",
                project,
                location,
                limit,
            )
        else:
            rows = await self._pool.fetch(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE project = $1 AND location = $2"
                " AND (create_time, run_id) < ($3, $4)"
                " ORDER BY create_time DESC, run_id DESC LIMIT $5",
                project,
                location,
                after[0],
                after[1],
                limit,
            )
        return [_run_from(row) for row in rows]

    async def store_metric_messages(self, messages: Sequence[MetricPointsReceived]) -> int:
        """Store the points of messages not stored before; return how many points were new.

        The ledger insert and the COPY share one transaction, so a message is either fully
        stored and recorded, or neither: a redelivery after a crash stores it exactly once.
        """
        async with self._pool.acquire() as conn, conn.transaction():
            fresh = await conn.fetch(
                "INSERT INTO metric_messages (event_id, run_id, point_count)"
                " SELECT * FROM unnest($1::uuid[], $2::text[], $3::integer[])"
                " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                [message.event_id for message in messages],
                [message.run_id for message in messages],
                [len(message.points) for message in messages],
            )
            fresh_ids = {row["event_id"] for row in fresh}
            records = [
                (message.run_id, point.name, point.step, point.time, point.value, point.host)
                for message in messages
                if message.event_id in fresh_ids
                for point in message.points
            ]
            if records:
                await conn.copy_records_to_table(
                    "metric_points",
                    records=records,
                    columns=("run_id", "metric", "step", "time", "value", "host"),
                    schema_name=self._schema,
                )
        return len(records)

    async def list_metrics(self, run_id: str) -> list[MetricSummary]:
        """Every metric the run recorded, with counts."""
        rows = await self._pool.fetch(
            "SELECT metric, count(*) AS point_count, max(step) AS last_step"
            " FROM metric_points WHERE run_id = $1 GROUP BY metric ORDER BY metric",
            run_id,
        )
        return [
            MetricSummary(
                name=row["metric"], point_count=row["point_count"], last_step=row["last_step"]
            )
            for row in rows
        ]

    async def read_series(
        self,
        run_id: str,
        metric: str,
        limit: int,
        after: tuple[int, str, datetime] | None,
    ) -> list[SeriesPoint]:
        """Points of one metric in (step, host, time) order, after a keyset position."""
        query = (
            "SELECT step, value, time, host FROM metric_points"
            " WHERE run_id = $1 AND metric = $2 {after}"
            " ORDER BY step, host, time LIMIT $3"
        )
        if after is None:
            rows = await self._pool.fetch(query.format(after=""), run_id, metric, limit)
        else:
            rows = await self._pool.fetch(
                query.format(after="AND (step, host, time) > ($4, $5, $6)"),
                run_id,
                metric,
                limit,
                *after,
            )
        return [
            SeriesPoint(step=row["step"], value=row["value"], time=row["time"], host=row["host"])
            for row in rows
        ]

    async def store_events(self, events: Sequence[WorkloadEvent]) -> int:
        """Store events not seen before; return how many were new."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(
                "INSERT INTO events (event_id, run_id, start_time, body)"
                " SELECT * FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[])"
                " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                [event.event_id for event in events],
                [event.run_id for event in events],
                [event.start_time for event in events],
                [event.model_dump_json() for event in events],
            )
        return len(rows)

    async def list_events(self, run_id: str) -> list[WorkloadEvent]:
        """A run's events, oldest first."""
        rows = await self._pool.fetch(
            "SELECT body FROM events WHERE run_id = $1 ORDER BY start_time, event_id", run_id
        )
        return [WorkloadEvent.model_validate_json(row["body"]) for row in rows]

    async def store_analyses(self, analyses: Sequence[Analysis]) -> int:
        """Store analyses not seen before; return how many were new."""
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(
                "INSERT INTO analyses (analysis_id, event_id, run_id, create_time, body)"
                " SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::timestamptz[],"
                " $5::text[]) ON CONFLICT (analysis_id) DO NOTHING RETURNING analysis_id",
                [analysis.analysis_id for analysis in analyses],
                [analysis.event_id for analysis in analyses],
                [analysis.run_id for analysis in analyses],
                [analysis.create_time for analysis in analyses],
                [analysis.model_dump_json() for analysis in analyses],
            )
        return len(rows)

    async def list_analyses(self, run_id: str) -> list[Analysis]:
        """A run's analyses, oldest first."""
        rows = await self._pool.fetch(
            "SELECT body FROM analyses WHERE run_id = $1 ORDER BY create_time, analysis_id",
            run_id,
        )
        return [Analysis.model_validate_json(row["body"]) for row in rows]

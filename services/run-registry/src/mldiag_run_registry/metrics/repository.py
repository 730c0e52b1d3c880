"""All SQL about metric points."""

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from mldiag_schemas.telemetry import MetricPointsReceived, MetricSummary, SeriesPoint


class MetricsRepository:
    """Metric points and the ledger of bus messages already stored."""

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self._pool = pool
        self._schema = schema

    async def store_messages(self, messages: Sequence[MetricPointsReceived]) -> int:
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

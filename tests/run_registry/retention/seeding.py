"""Everything a run can have recorded against it, seeded for the retention tests: rows in
every room's tables (written as the rooms store them) and profile files in local storage."""

import uuid
from datetime import UTC, datetime

from mldiag_platform.storage import FileStore
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_schemas.ids import run_name
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, to_unix_micros
from run_registry.retention.conftest import Retention

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)

# (table, the SQL that counts one run's rows in it: $1 is the run id). Not the ledger of
# stored point messages: it outlives a purge, so a late redelivery stores nothing.
TABLES = (
    ("runs", "SELECT count(*) FROM runs WHERE run_id = $1"),
    ("metric_series", "SELECT count(*) FROM metric_series WHERE run_id = $1"),
    (
        "metric_rollups",
        "SELECT count(*) FROM metric_rollups WHERE series_id IN"
        " (SELECT series_id FROM metric_series WHERE run_id = $1)",
    ),
    ("events", "SELECT count(*) FROM events WHERE run_id = $1"),
    ("analyses", "SELECT count(*) FROM analyses WHERE run_id = $1"),
    ("log_chunks", "SELECT count(*) FROM log_chunks WHERE run_id = $1"),
    ("heartbeats", "SELECT count(*) FROM heartbeats WHERE run_id = $1"),
    ("profiler_sessions", "SELECT count(*) FROM profiler_sessions WHERE run_id = $1"),
    ("profiler_session_hosts", "SELECT count(*) FROM profiler_session_hosts WHERE run_id = $1"),
    ("profiler_targets", "SELECT count(*) FROM profiler_targets WHERE run_id = $1"),
    (
        "operations",
        "SELECT count(*) FROM operations WHERE target LIKE '%/machineLearningRuns/' || $1"
        " OR target LIKE '%/machineLearningRuns/' || $1 || '/%'",
    ),
)


async def rows_of(retention: Retention, run_id: str) -> dict[str, int]:
    """How many rows of the run each table holds."""
    return {table: await retention.pool.fetchval(sql, run_id) for table, sql in TABLES}


async def series_of(retention: Retention, run_id: str) -> list[int]:
    """The ids of the run's metric series."""
    rows = await retention.pool.fetch(
        "SELECT series_id FROM metric_series WHERE run_id = $1", run_id
    )
    return [row["series_id"] for row in rows]


async def chunks_of(retention: Retention, series_ids: list[int]) -> int:
    """How many stored point chunks those series hold."""
    count: int = await retention.pool.fetchval(
        "SELECT count(*) FROM metric_chunks WHERE series_id = ANY($1::bigint[])", series_ids
    )
    return count


async def files_of(retention: Retention, run_id: str) -> list[str]:
    """The run's files in storage."""
    return await FileStore(retention.storage).list(f"{run_id}/")


async def new_run(
    retention: Retention, run_id: str, project: str = "default", **fields: object
) -> None:
    """Create a run through the API (live unless ``fields`` say otherwise)."""
    response = await retention.api.post(
        f"/v1/projects/{project}/locations/local/machineLearningRuns",
        json={"runId": run_id, "displayName": run_id, **fields},
    )
    assert response.status_code == 200, response.text


async def store_points(
    retention: Retention,
    run_id: str,
    project: str = "default",
    *,
    steps: int = 1000,
    stored_at: datetime | None = None,
) -> None:
    """Points of two metrics, stored as metrics/ stores a bus message (at ``stored_at``,
    which decides their storage week; default: now)."""
    base = to_unix_micros(T0)
    series = [
        MetricColumns(
            name=name,
            host="h0",
            steps=list(range(steps)),
            values=[float(step) for step in range(steps)],
            times_unix_us=[base + step for step in range(steps)],
        )
        for name in ("loss", "accuracy")
    ]
    message = MetricPointsReceived(
        run_id=run_id, batch_id=uuid.uuid4(), chunk=0, occurred_at=T0, series=series
    )
    store = retention.metrics
    if stored_at is not None:
        moment = stored_at.timestamp()
        store = MetricsRepository(retention.pool, retention.schema, clock=lambda: moment)
    await store.store_messages([message], {run_id: project})


async def seed(retention: Retention, run_id: str, project: str = "default") -> None:
    """A live run with something in every room: points, events and analyses, log chunks,
    heartbeats, a profiler session with files on two hosts, a target, operations."""
    await new_run(retention, run_id, project)
    await store_points(retention, run_id, project)
    pool = retention.pool
    for _ in range(2):
        event_id = uuid.uuid4()
        await pool.execute(
            "INSERT INTO events (event_id, run_id, start_time, body, type)"
            " VALUES ($1, $2, $3, '{}', 'HANG')",
            event_id,
            run_id,
            T0,
        )
        await pool.execute(
            "INSERT INTO analyses (analysis_id, event_id, run_id, create_time, body)"
            " VALUES ($1, $2, $3, $4, '{}')",
            uuid.uuid4(),
            event_id,
            run_id,
            T0,
        )
    for part in range(3):
        await pool.execute(
            "INSERT INTO log_chunks (run_id, batch_id, part, host, stream, first_time,"
            " last_time, line_count, max_severity, body)"
            " VALUES ($1, $2, $3, 'h0', 'stdout', $4, $4, 1, 0, '\\x00')",
            run_id,
            uuid.uuid4(),
            part,
            T0,
        )
    for host in ("h0", "h1"):
        await pool.execute(
            "INSERT INTO heartbeats (run_id, host, process_index, pid, interval_seconds,"
            " last_seen, first_seen) VALUES ($1, $2, 0, 1, 10, $3, $3)",
            run_id,
            host,
            T0,
        )
        await pool.execute(
            "INSERT INTO profiler_targets (run_id, host, process_index, address,"
            " register_time, update_time) VALUES ($1, $2, 0, $2 || ':9012', $3, $3)",
            run_id,
            host,
            T0,
        )
    await _profile_session(retention, run_id, project)


async def _profile_session(retention: Retention, run_id: str, project: str) -> None:
    session = "session-1"
    folder_key = f"{run_id}/plugins/profile/{session}"
    folder_uri = f"file://{retention.storage}/{folder_key}"
    store = FileStore(retention.storage)
    await retention.pool.execute(
        "INSERT INTO profiler_sessions (run_id, session_id, project, location, kind, phase,"
        " storage_folder_uri, create_time, update_time)"
        " VALUES ($1, $2, $3, 'local', 'ON_DEMAND', 'COMPLETED', $4, $5, $5)",
        run_id,
        session,
        project,
        folder_uri,
        T0,
    )
    for host in ("h0", "h1"):
        key = f"{folder_key}/{host}.xplane.pb"
        await store.put(key, b"xplane")
        await retention.pool.execute(
            "INSERT INTO profiler_session_hosts (run_id, session_id, host, phase, file_uri,"
            " update_time) VALUES ($1, $2, $3, 'COMPLETED', $4, $5)",
            run_id,
            session,
            host,
            f"file://{retention.storage}/{key}",
            T0,
        )
    # a capture's operation names the session, under the run
    await retention.pool.execute(
        "INSERT INTO operations (operation_id, project, location, verb, target, done,"
        " create_time) VALUES ($1, $2, 'local', 'capture', $3, true, $4)",
        uuid.uuid4().hex,
        project,
        f"{run_name(project, 'local', run_id)}/profilerSessions/{session}",
        T0,
    )

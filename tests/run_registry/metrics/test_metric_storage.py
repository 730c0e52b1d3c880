"""Metric storage against real PostgreSQL: idempotent COPY, rollups checked against a
brute-force computation over the raw points, and every query endpoint."""

import math
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest

from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics import handlers
from mldiag_run_registry.metrics.repository import ROLLUP_LEVELS, MetricsRepository
from mldiag_run_registry.metrics.service import MetricsService
from mldiag_run_registry.runs.errors import RunNotFound
from mldiag_schemas.runs import Run, RunMetricsSummary
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, to_unix_micros
from support import router_client

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUNS = "/v1/machineLearningRuns"


class KnownRuns:
    """The registry's run lookup, reduced to a set of ids (the runs part is tested apart)."""

    def __init__(self, *run_ids: str) -> None:
        self.run_ids = set(run_ids)
        self.summaries: dict[str, RunMetricsSummary] = {}

    async def set_metrics_summary(self, run_id: str, summary: RunMetricsSummary) -> None:
        self.summaries[run_id] = summary

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        if run_id not in self.run_ids or (project, location) != ("default", "local"):
            raise RunNotFound(f"run {run_id} not found")
        return None  # type: ignore[return-value]  # callers only need the raise


@dataclass
class Store:
    pool: asyncpg.Pool
    service: MetricsService
    api: httpx.AsyncClient
    runs: KnownRuns


@pytest.fixture
async def store(database_settings: DatabaseSettings, db_schema: str) -> AsyncIterator[Store]:
    pool = await create_pool(database_settings, db_schema)
    await apply_migrations(
        pool,
        db_schema,
        [
            *load_migrations("run-registry", "mldiag_run_registry.migrations"),
            *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
        ],
    )
    runs = KnownRuns("run-a", "run-b")
    service = MetricsService(
        MetricsRepository(pool, db_schema, max_series_per_metric=4), runs, runs
    )
    async with router_client(handlers.router, metrics=service) as client:
        yield Store(pool, service, client, runs)
    await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
    await pool.close()


def _message(run_id: str, *series: MetricColumns) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id=run_id, batch_id=uuid.uuid4(), chunk=0, occurred_at=NOW, series=list(series)
    )


def _columns(
    name: str, steps: list[int], values: list[float], host: str = "h0", process: int | None = None
) -> MetricColumns:
    base = to_unix_micros(NOW)
    return MetricColumns(
        name=name,
        host=host,
        process_index=process,
        labels={} if process is None else {"device": str(process)},
        steps=steps,
        values=values,
        times_unix_us=[base + step for step in steps],
    )


def _random_values(rng: random.Random, count: int) -> list[float]:
    special = [math.nan, math.inf, -math.inf]
    return [rng.choice(special) if rng.random() < 0.03 else rng.gauss(0, 10) for _ in range(count)]


@dataclass
class Agg:
    count: int
    nan_count: int
    min: float | None
    max: float | None
    sum: float | None
    first_step: int
    last_step: int
    last_value: float


def _brute(points: list[tuple[int, float]]) -> Agg:
    """Aggregates of (step, value) points by definition (docs/metrics.md)."""
    real = [v for _, v in points if not math.isnan(v)]
    last_step = max(s for s, _ in points)
    return Agg(
        count=len(points),
        nan_count=len(points) - len(real),
        min=min(real) if real else None,
        max=max(real) if real else None,
        sum=math.fsum(real) if real and not _mixed_inf(real) else (math.nan if real else None),
        first_step=min(s for s, _ in points),
        last_step=last_step,
        last_value=next(v for s, v in reversed(points) if s == last_step),
    )


def _mixed_inf(values: list[float]) -> bool:
    return math.inf in values and -math.inf in values


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def _assert_agg(got: Agg, want: Agg) -> None:
    assert (got.count, got.nan_count, got.first_step, got.last_step) == (
        want.count,
        want.nan_count,
        want.first_step,
        want.last_step,
    )
    for field in ("min", "max", "sum", "last_value"):
        assert _same(getattr(got, field), getattr(want, field)), (field, got, want)


async def test_a_replayed_or_overlapping_batch_never_stores_twice(store: Store) -> None:
    first = _message("run-a", _columns("loss", [0, 1, 2], [1.0, 2.0, 3.0]))
    second = _message("run-a", _columns("loss", [3, 4], [4.0, math.nan]))
    assert await store.service.store([first]) == 3
    assert await store.service.store([first, second]) == 2  # first is in the ledger already
    assert await store.service.store([second, first]) == 0
    # a retry past JetStream's dedupe window can sit in one batch beside its original
    third = _message("run-a", _columns("loss", [5], [5.0]))
    assert await store.service.store([third, third]) == 1
    assert await store.pool.fetchval("SELECT sum(point_count) FROM metric_chunks") == 6
    fine = await store.pool.fetchrow(
        "SELECT sum(count) AS count, sum(nan_count) AS nan_count, sum(sum) AS sum"
        " FROM metric_rollups WHERE width_log2 = $1",
        ROLLUP_LEVELS[0],
    )
    assert (fine["count"], fine["nan_count"], fine["sum"]) == (6, 1, 15.0)
    listing = (await store.api.get(f"{RUNS}/run-a/metrics")).json()
    assert listing == {"metrics": [{"name": "loss", "pointCount": 6, "lastStep": 5}]}


async def test_rollups_match_a_brute_force_computation_over_raw_points(store: Store) -> None:
    rng = random.Random(7)
    truth: dict[tuple[str, int | None], list[tuple[int, float]]] = {}
    messages = []
    for host, process in (("h0", None), ("h0", 1), ("h1", None)):
        steps = sorted(rng.sample(range(50_000), 6_000))
        values = _random_values(rng, len(steps))
        truth[(host, process)] = list(zip(steps, values, strict=True))
        # several messages per series, out of order, so merging across batches is exercised
        for start in range(0, len(steps), 1_700):
            part = slice(start, start + 1_700)
            messages.append(
                _message("run-a", _columns("loss", steps[part], values[part], host, process))
            )
    rng.shuffle(messages)
    for start in range(0, len(messages), 3):
        await store.service.store(messages[start : start + 3])

    series = {
        (row["host"], row["process_index"]): row["series_id"]
        for row in await store.pool.fetch("SELECT * FROM metric_series")
    }
    for key, points in truth.items():
        points.sort()
        for level in ROLLUP_LEVELS:
            rows = await store.pool.fetch(
                "SELECT * FROM metric_rollups WHERE series_id = $1 AND width_log2 = $2"
                " ORDER BY bucket",
                series[key],
                level,
            )
            expected: dict[int, list[tuple[int, float]]] = {}
            for step, value in points:
                expected.setdefault(step >> level, []).append((step, value))
            assert [row["bucket"] for row in rows] == sorted(expected)
            for row in rows:
                got = Agg(**{f: row[f] for f in Agg.__dataclass_fields__})
                _assert_agg(got, _brute(expected[row["bucket"]]))

    await _check_api_buckets(store, truth)


def _line_points(
    truth: dict[tuple[str, int | None], list[tuple[int, float]]],
    line: dict[str, object],
    group_by: str,
) -> list[tuple[int, float]]:
    return sorted(
        point
        for (host, process), pts in truth.items()
        if group_by == "none"
        or (host == line["host"] and (group_by == "host" or process == line["processIndex"]))
        for point in pts
    )


async def _check_api_buckets(
    store: Store, truth: dict[tuple[str, int | None], list[tuple[int, float]]]
) -> None:
    """The API's buckets, per series, per host and merged, from rollups and from raw points."""
    for buckets, source_prefix in ((40, "rollup"), (13, "rollup:4096"), (5_000, "raw")):
        for group_by in ("series", "host", "none"):
            response = await store.api.get(
                f"{RUNS}/run-a/metrics/loss", params={"buckets": buckets, "groupBy": group_by}
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["source"].startswith(source_prefix)
            width = body["bucketWidth"]
            for line in body["series"]:
                assert len(line["buckets"]) <= buckets
                points = sorted(
                    point
                    for (host, process), pts in truth.items()
                    if group_by == "none"
                    or (
                        host == line["host"]
                        and (group_by == "host" or process == line["processIndex"])
                    )
                    for point in pts
                )
                expected_buckets: dict[int, list[tuple[int, float]]] = {}
                for step, value in points:
                    expected_buckets.setdefault(step // width, []).append((step, value))
                assert len(line["buckets"]) == len(expected_buckets)
                for bucket in line["buckets"]:
                    want = _brute(expected_buckets[bucket["startStep"] // width])
                    real = want.count - want.nan_count
                    got = Agg(
                        count=bucket["count"],
                        nan_count=bucket["nanCount"],
                        min=bucket["min"],
                        max=bucket["max"],
                        sum=None if bucket["mean"] is None else bucket["mean"] * real,
                        first_step=bucket["firstStep"],
                        last_step=bucket["lastStep"],
                        last_value=bucket["last"],
                    )
                    if group_by != "series":  # equal steps on two series: either is "last"
                        got.last_value = want.last_value
                    _assert_agg(got, want)
            expected_lines = {"series": 3, "host": 2, "none": 1}[group_by]
            assert len(body["series"]) == expected_lines


async def test_latest_values_raw_pages_and_comparison(store: Store) -> None:
    await store.service.store(
        [
            _message(
                "run-a",
                _columns("loss", [0, 1, 2], [3.0, 2.0, math.nan], "h0", 0),
                _columns("loss", [0, 1, 2], [3.5, 2.5, 1.5], "h0", 1),
                _columns("train/acc", [5], [0.9]),
            ),
            _message("run-b", _columns("loss", list(range(100)), [1.0] * 100)),
        ]
    )
    latest = (await store.api.get(f"{RUNS}/run-a/metrics:latest")).json()["values"]
    assert [(v["name"], v["processIndex"], v["step"]) for v in latest] == [
        ("loss", 0, 2),
        ("loss", 1, 2),
        ("train/acc", None, 5),
    ]
    assert math.isnan(latest[0]["value"]) and latest[1]["value"] == 1.5
    assert latest[0]["labels"] == {"device": "0"}

    full = "/v1/projects/default/locations/local/machineLearningRuns/run-a/metrics/train/acc"
    page = (await store.api.get(full)).json()
    assert [(p["step"], p["value"]) for p in page["points"]] == [(5, 0.9)]

    steps: list[int] = []
    token = ""
    while True:
        page = (
            await store.api.get(
                f"{RUNS}/run-a/metrics/loss", params={"pageSize": 4, "pageToken": token}
            )
        ).json()
        steps.extend(p["step"] for p in page["points"])
        token = page["nextPageToken"]
        if not token:
            break
    assert steps == [0, 0, 1, 1, 2, 2]

    compared = await store.api.get(
        f"{RUNS}:compareMetrics", params={"runs": "run-a,run-b", "metric": "loss", "buckets": 10}
    )
    assert compared.status_code == 200, compared.text
    body = compared.json()
    assert [line["runId"] for line in body["series"]] == ["run-a", "run-b"]
    assert body["bucketWidth"] == 10
    assert sum(b["count"] for b in body["series"][1]["buckets"]) == 100
    assert body["series"][0]["buckets"][0]["count"] == 6
    assert body["series"][0]["buckets"][0]["nanCount"] == 1


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        (f"{RUNS}/nope/metrics/loss", {}, 404, "run_not_found"),
        (f"{RUNS}/nope/metrics:latest", {}, 404, "run_not_found"),
        (f"{RUNS}/nope/metrics/loss", {"buckets": 10}, 404, "run_not_found"),
        (f"{RUNS}/run-a/metrics/loss", {"buckets": 0}, 400, "invalid_bucket_count"),
        (f"{RUNS}/run-a/metrics/loss", {"buckets": 10, "groupBy": "gpu"}, 400, "invalid_group_by"),
        (f"{RUNS}/run-a/metrics/loss", {"pageToken": "garbage"}, 400, "invalid_page_token"),
        (f"{RUNS}:compareMetrics", {"runs": "run-a,nope", "metric": "loss"}, 404, "run_not_found"),
        (f"{RUNS}:compareMetrics", {"runs": ",", "metric": "loss"}, 400, "invalid_run_list"),
    ],
)
async def test_query_mistakes_get_stable_codes(
    store: Store, path: str, params: dict[str, object], status: int, code: str
) -> None:
    response = await store.api.get(path, params=params)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


async def test_series_beyond_the_per_metric_bound_are_dropped_not_stored(store: Store) -> None:
    many = [_columns("loss", [1], [1.0], f"h{index}") for index in range(6)]
    assert await store.service.store([_message("run-a", *many)]) == 4  # the bound is 4
    assert await store.service.store([_message("run-a", _columns("loss", [2], [2.0], "h0"))]) == 1
    assert await store.pool.fetchval("SELECT count(*) FROM metric_series") == 4


async def test_the_run_summary_is_the_mean_of_its_well_known_metrics(store: Store) -> None:
    steps = list(range(0, 300_000, 1000))  # spread over several coarsest buckets
    await store.service.store(
        [
            _message(
                "run-a",
                _columns("step_time", steps, [0.5] * (len(steps) - 1) + [math.nan]),
                _columns("step_time", [1, 2], [2.0, 2.0], host="h1"),
                _columns("mfu", [1, 2, 3], [40.0, 50.0, 60.0]),
                _columns("loss", [1], [9.0]),
            )
        ]
    )
    summary = store.runs.summaries["run-a"]
    expected_step_time = (0.5 * (len(steps) - 1) + 4.0) / (len(steps) + 1)  # NaN left out
    assert summary.avg_step_time == pytest.approx(expected_step_time)
    assert summary.avg_mfu == pytest.approx(50.0)
    assert summary.avg_throughput is None and summary.avg_latency is None
    # a batch without summary metrics leaves the summary alone
    store.runs.summaries.clear()
    await store.service.store([_message("run-a", _columns("loss", [2], [8.0]))])
    assert store.runs.summaries == {}

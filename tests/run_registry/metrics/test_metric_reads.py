"""Raw reads and exports against real PostgreSQL, checked against brute force: every page is
the JSON pydantic wrote for the same points (byte for byte), page tokens cover every point
once, and CSV / JSON Lines exports hold exactly the stored points, NaN and ±Inf included."""

import csv
import io
import json
import math
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.listing.paging import encode_token
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.metrics import handlers, repository, service
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.metrics.service import MetricsService
from mldiag_run_registry.runs.errors import RunNotFound
from mldiag_schemas.auth import Role
from mldiag_schemas.runs import Run, RunMetricsSummary
from mldiag_schemas.telemetry import (
    MetricColumns,
    MetricPointsReceived,
    ReadMetricSeriesResponse,
    to_unix_micros,
)
from run_registry.helpers import RegistrySettings
from support import router_client, serving

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RUNS = "/v1/machineLearningRuns"
METRIC = "train/loss:avg"  # a '/' and a ':' in the name: the export takes it as a parameter


class KnownRuns:
    """The registry's run lookup and finder, reduced to a set of ids."""

    def __init__(self, *run_ids: str) -> None:
        self.run_ids = set(run_ids)

    async def set_metrics_summary(self, run_id: str, summary: RunMetricsSummary) -> None:
        """Summaries are not what these tests read."""

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        if run_id not in self.run_ids or (project, location) != ("default", "local"):
            raise RunNotFound(f"run {run_id} not found")
        return None  # type: ignore[return-value]  # callers only need the raise

    async def find_run(self, run_id: str) -> tuple[str, str, Run] | None:
        if run_id not in self.run_ids:
            return None
        return "default", "local", None  # type: ignore[return-value]  # only the project


@dataclass
class Store:
    pool: asyncpg.Pool
    service: MetricsService
    api: httpx.AsyncClient


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
    metrics = MetricsService(MetricsRepository(pool, db_schema), runs, runs, runs)
    async with router_client(handlers.router, metrics=metrics) as client:
        yield Store(pool, metrics, client)
    await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
    await pool.close()


@dataclass(frozen=True)
class Point:
    step: int
    series: int  # index into SERIES
    time_us: int
    value: float


SERIES: list[tuple[str, int | None, dict[str, str]]] = [
    ("h0", None, {}),
    ("h0", 1, {"device": "1"}),
    ('host "two", eh', 0, {"kind": "a,b", "rank": "0"}),  # in jsonb's key order
]


def _value(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.1:
        return rng.choice([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e-5, 3e-7, 1e16])
    return rng.gauss(0, 1) * 10.0 ** rng.randint(-9, 20)


def _points(rng: random.Random, steps: int) -> list[Point]:
    """Three series over ``steps`` steps, some missing, some written twice (a rewritten
    step keeps both points, at their own times)."""
    base = to_unix_micros(NOW)
    found = []
    for series in range(len(SERIES)):
        for step in range(steps):
            if rng.random() < 0.2:
                continue
            # a whole second now and then: the time is written without its fraction
            found.append(Point(step, series, base + step * 1_000_000 + series, _value(rng)))
            if rng.random() < 0.1:
                found.append(Point(step, series, base + step * 1_000_000 + 777, _value(rng)))
    return found


def _message(run_id: str, metric: str, points: list[Point]) -> MetricPointsReceived:
    columns = []
    for index, (host, process, labels) in enumerate(SERIES):
        mine = [p for p in points if p.series == index]
        if mine:
            columns.append(
                MetricColumns(
                    name=metric,
                    host=host,
                    process_index=process,
                    labels=labels,
                    steps=[p.step for p in mine],
                    values=[p.value for p in mine],
                    times_unix_us=[p.time_us for p in mine],
                )
            )
    return MetricPointsReceived(
        run_id=run_id, batch_id=uuid.uuid4(), chunk=0, occurred_at=NOW, series=columns
    )


async def _stored(store: Store, run_id: str, metric: str, points: list[Point]) -> list[Point]:
    """Store ``points`` in a few messages; the brute-force order of a read: (step, series
    id, time)."""
    for start in range(0, len(points), 400):
        await store.service.store([_message(run_id, metric, points[start : start + 400])])
    return await _in_read_order(store, run_id, metric, points)


async def _series_ids(store: Store, run_id: str, metric: str) -> dict[int, int]:
    """Series index (into SERIES) → stored series id."""
    rows = await store.pool.fetch(
        "SELECT series_id, host, process_index FROM metric_series WHERE run_id = $1"
        " AND metric = $2",
        run_id,
        metric,
    )
    by_identity = {(row["host"], row["process_index"]): row["series_id"] for row in rows}
    return {index: by_identity[(h, p)] for index, (h, p, _) in enumerate(SERIES)}


async def _in_read_order(
    store: Store, run_id: str, metric: str, points: list[Point]
) -> list[Point]:
    ids = await _series_ids(store, run_id, metric)
    return sorted(points, key=lambda p: (p.step, ids[p.series], p.time_us))


async def _pages(api: httpx.AsyncClient, url: str, size: int) -> AsyncIterator[httpx.Response]:
    """Every page of ``url`` at ``size`` points a page, following the tokens to the end."""
    token = ""
    while True:
        params: dict[str, Any] = {"pageSize": size}
        if token:
            params["pageToken"] = token
        answer = await api.get(url, params=params)
        assert answer.status_code == 200, answer.text
        yield answer
        token = answer.json().get("nextPageToken", "")
        if not token:
            return


def _point_json(point: Point) -> dict[str, Any]:
    host, process, labels = SERIES[point.series]
    return {
        "step": point.step,
        "value": point.value,
        "time": EPOCH + timedelta(microseconds=point.time_us),
        "host": host,
        "process_index": process,
        "labels": labels,
    }


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


async def test_pages_are_the_json_pydantic_wrote_and_their_tokens_cover_every_point_once(
    store: Store,
) -> None:
    rng = random.Random(19)
    expected = await _stored(store, "run-a", METRIC, _points(rng, 300))
    ids = await _series_ids(store, "run-a", METRIC)
    url = f"{RUNS}/run-a/metrics/{METRIC}"
    for size in (1, 7, 64, 1000, len(expected), len(expected) + 1):
        read: list[Point] = []
        async for answer in _pages(store.api, url, size):
            assert answer.headers["content-type"] == "application/json"
            page = expected[len(read) : len(read) + size]
            more = len(read) + len(page) < len(expected)
            last = page[-1]
            next_token = (
                encode_token({"s": last.step, "i": ids[last.series], "t": last.time_us})
                if more
                else ""
            )
            want = ReadMetricSeriesResponse.model_validate(
                {
                    "metric": METRIC,
                    "points": [_point_json(p) for p in page],
                    "next_page_token": next_token,
                }
            )
            # the bytes, not just the parsed JSON: the SDK and the console see no change
            assert answer.content == want.model_dump_json().encode()
            read.extend(page)
        assert read == expected


async def test_pages_never_end_inside_points_equal_in_step_series_and_time(
    store: Store,
) -> None:
    # the same step written again with the same time (a retried write under a new batch
    # id): the keyset token cannot tell such points apart, so a page never splits them
    base = to_unix_micros(NOW)
    points = [Point(0, 0, base, 0.5)]
    points += [Point(1, 0, base + 1, float(n)) for n in range(5)]
    points += [Point(2, 0, base + 2, 2.0)]
    await store.service.store([_message("run-b", METRIC, points)])
    url = f"{RUNS}/run-b/metrics/{METRIC}"
    for size in (1, 2, 3, 4, 6):
        read: list[tuple[int, float]] = []
        pages = 0
        async for response in _pages(store.api, url, size):
            read += [(point["step"], point["value"]) for point in response.json()["points"]]
            pages += 1
        assert sorted(read) == sorted((p.step, p.value) for p in points), size
        assert pages <= len(points)


async def test_a_page_of_an_unknown_metric_is_empty(store: Store) -> None:
    answer = await store.api.get(f"{RUNS}/run-a/metrics/nothing")
    assert answer.content == b'{"metric":"nothing","points":[],"nextPageToken":""}'


def _csv_points(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _check_row(got: dict[str, Any], want: Point) -> None:
    host, process, labels = SERIES[want.series]
    assert int(got["step"]) == want.step
    assert _same(float(got["value"]), want.value)
    assert datetime.fromisoformat(got["time"]) == EPOCH + timedelta(microseconds=want.time_us)
    assert got["host"] == host
    wrote = got["processIndex"]
    assert (None if wrote in ("", None) else int(wrote)) == process
    assert (json.loads(got["labels"]) if isinstance(got["labels"], str) else got["labels"]) == (
        labels
    )


@pytest.mark.parametrize("export_format", ["csv", "jsonl"])
async def test_an_export_holds_every_point_of_every_series_in_read_order(
    store: Store, monkeypatch: pytest.MonkeyPatch, export_format: str
) -> None:
    # small blocks, so the export crosses many block boundaries (and rewritten steps sit
    # across some of them)
    monkeypatch.setattr(repository, "SCAN_BLOCK_POINTS", 97)
    monkeypatch.setattr(service, "EXPORT_BLOCK_POINTS", 250)
    rng = random.Random(7)
    expected = await _stored(store, "run-a", METRIC, _points(rng, 700))
    await store.service.store([_message("run-a", "other", _points(rng, 5))])
    answer = await store.api.get(
        f"{RUNS}/run-a/metrics:export", params={"metric": METRIC, "format": export_format}
    )
    assert answer.status_code == 200, answer.text
    filename = f"run-a-train_loss_avg.{export_format}"
    assert answer.headers["content-disposition"] == f'attachment; filename="{filename}"'
    if export_format == "csv":
        assert answer.headers["content-type"] == "text/csv; charset=utf-8"
        assert answer.text.startswith("step,value,time,host,processIndex,labels\n")
        rows: list[dict[str, Any]] = _csv_points(answer.text)
    else:
        assert answer.headers["content-type"] == "application/jsonl"
        assert answer.text.endswith("\n")
        rows = [json.loads(line) for line in answer.text.splitlines()]
    assert len(rows) == len(expected)
    for got, want in zip(rows, expected, strict=True):
        _check_row(got, want)


async def test_an_export_over_a_step_range_holds_its_points_only(store: Store) -> None:
    rng = random.Random(3)
    expected = await _stored(store, "run-a", METRIC, _points(rng, 200))
    answer = await store.api.get(
        f"{RUNS}/run-a/metrics:export",
        params={"metric": METRIC, "format": "jsonl", "startStep": 50, "endStep": 120},
    )
    rows = [json.loads(line) for line in answer.text.splitlines()]
    wanted = [p for p in expected if 50 <= p.step <= 120]
    assert len(rows) == len(wanted)
    for got, want in zip(rows, wanted, strict=True):
        _check_row(got, want)


async def test_a_jsonl_line_is_a_page_point(store: Store) -> None:
    rng = random.Random(5)
    await _stored(store, "run-a", METRIC, _points(rng, 30))
    page = (await store.api.get(f"{RUNS}/run-a/metrics/{METRIC}")).content
    lines = (
        await store.api.get(
            f"{RUNS}/run-a/metrics:export", params={"metric": METRIC, "format": "jsonl"}
        )
    ).content
    inner = page.split(b'"points":[', 1)[1].rsplit(b'],"nextPageToken"', 1)[0]
    assert inner.replace(b'},{"step"', b'}\n{"step"') + b"\n" == lines


@pytest.mark.parametrize(
    ("export_format", "body"),
    [("csv", b"step,value,time,host,processIndex,labels\n"), ("jsonl", b"")],
)
async def test_an_export_of_an_unknown_metric_is_empty(
    store: Store, export_format: str, body: bytes
) -> None:
    answer = await store.api.get(
        f"{RUNS}/run-b/metrics:export", params={"metric": "nothing", "format": export_format}
    )
    assert (answer.status_code, answer.content) == (200, body)


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        (f"{RUNS}/run-a/metrics:export", {"metric": "loss", "format": "xlsx"}, 400, "invalid_export_format"),
        (f"{RUNS}/run-a/metrics:export", {"metric": "loss", "format": "CSV"}, 400, "invalid_export_format"),
        (f"{RUNS}/nope/metrics:export", {"metric": "loss"}, 404, "run_not_found"),
        (f"{RUNS}/run-a/metrics:export", {"metric": "loss", "startStep": -1}, 400, "invalid_step_range"),
        (f"{RUNS}/run-a/metrics:export", {"metric": "loss", "startStep": 9, "endStep": 2}, 400, "invalid_step_range"),
    ],
)  # fmt: skip
async def test_export_mistakes_get_stable_codes(
    store: Store, path: str, params: dict[str, str | int], status: int, code: str
) -> None:
    answer = await store.api.get(path, params=params)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)


async def test_an_export_needs_a_reader(store: Store) -> None:
    answer = await store.api.get(
        f"{RUNS}/run-a/metrics:export",
        params={"metric": "loss"},
        headers={"Authorization": "Bearer nope"},
    )
    assert answer.status_code == 401
    async with router_client(handlers.router, Role.VIEWER, metrics=store.service) as viewer:
        answer = await viewer.get(f"{RUNS}/run-a/metrics:export", params={"metric": "loss"})
        assert answer.status_code == 200


async def test_a_run_share_link_exports_that_run_only(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> None:
    """The whole registry: the route sits beside the run's other reads, so a run link opens
    it for its run and no other; a caller without a token is refused."""
    settings = registry_settings_with(public_url="https://mldiag.example")
    async with serving(create_app(settings), api_tokens.headers(Role.EDITOR)) as registry:
        for run_id in ("shared-run", "other-run"):
            created = await registry.post(RUNS, json={"runId": run_id, "displayName": run_id})
            assert created.status_code == 200, created.text
        link = await registry.post(
            "/v1/shareLinks", json={"resource": "machineLearningRuns/shared-run"}
        )
        token = link.json()["token"]
        params = {"metric": "loss", "format": "jsonl"}
        own = await registry.get(f"{RUNS}/shared-run/metrics:export", params=params)
        assert (own.status_code, own.content) == (200, b"")
        async with httpx.AsyncClient(
            transport=registry._transport,  # the same app, in-process
            base_url="http://test",
            headers={"Authorization": f"Bearer {token}"},
        ) as holder:
            shared = await holder.get(f"{RUNS}/shared-run/metrics:export", params=params)
            assert shared.status_code == 200, shared.text
            other = await holder.get(f"{RUNS}/other-run/metrics:export", params=params)
            assert (other.status_code, other.json()["error"]["code"]) == (
                403,
                "outside_share_scope",
            )
        async with httpx.AsyncClient(
            transport=registry._transport, base_url="http://test"
        ) as anonymous:
            refused = await anonymous.get(f"{RUNS}/shared-run/metrics:export", params=params)
            assert refused.status_code == 401

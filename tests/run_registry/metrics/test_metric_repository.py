"""The chunked metric store against real PostgreSQL: pages, scans, raw buckets and point
times checked against a brute force over the points written (out of order, rewritten steps,
overlapping chunks), the upgrade from one row per point, partitions, retention and purge."""

import asyncio
import math
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest

from mldiag_platform.database import Migration, apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics import repository as repository_module
from mldiag_run_registry.metrics.blocks import PointBlock
from mldiag_run_registry.metrics.repository import (
    MetricsRepository,
    partition_name,
    series_key,
)
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived

pytestmark = pytest.mark.connected

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DAY = 20_454  # 2026-01-01 (days since 1970-01-01); its partition starts on day 20,454 - 20,454 % 7
BASE_US = 1_767_225_600_000_000

# (step, series id, time µs, value bits): the identity of a stored point
Point = tuple[int, int, int, int]


def _migrations() -> list[Migration]:
    return [
        *load_migrations("run-registry", "mldiag_run_registry.migrations"),
        *load_migrations("run-registry-metrics", "mldiag_run_registry.metrics.migrations"),
    ]


class Clock:
    """A settable clock: the day points are stored on decides their partition."""

    def __init__(self, day: int) -> None:
        self.day = day

    def __call__(self) -> float:
        return self.day * 86_400.0 + 3_600


@dataclass
class Store:
    pool: asyncpg.Pool
    schema: str
    repository: MetricsRepository
    clock: Clock


@pytest.fixture
async def store(database_settings: DatabaseSettings, db_schema: str) -> AsyncIterator[Store]:
    pool = await create_pool(database_settings, db_schema)
    await apply_migrations(pool, db_schema, _migrations())
    clock = Clock(DAY)
    repository = MetricsRepository(pool, db_schema, chunk_points=50, clock=clock)
    yield Store(pool, db_schema, repository, clock)
    await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
    await pool.close()


def _message(run_id: str, *series: MetricColumns) -> MetricPointsReceived:
    return MetricPointsReceived(
        run_id=run_id, batch_id=uuid.uuid4(), chunk=0, occurred_at=NOW, series=list(series)
    )


def _bits(value: float) -> int:
    return int(np.array([value], dtype=np.float64).view(np.uint64)[0])


def _points(block: PointBlock) -> list[Point]:
    return list(
        zip(
            block.steps.tolist(),
            block.series_ids.tolist(),
            block.times_us.tolist(),
            block.values.view(np.uint64).tolist(),
            strict=True,
        )
    )


async def _series_ids(store: Store) -> dict[str, int]:
    rows = await store.pool.fetch("SELECT series_id, host FROM metric_series WHERE metric = 'loss'")
    return {row["host"]: row["series_id"] for row in rows}


async def _fill(store: Store, rng: random.Random) -> dict[str, list[tuple[int, int, float]]]:
    """Three series of loss (hosts h0, h1, h2): random steps with rewrites, in messages of
    random sizes stored out of order, then a late batch over old steps."""
    truth: dict[str, list[tuple[int, int, float]]] = {}
    messages = []
    special = [math.nan, math.inf, -math.inf, -0.0]
    clock = 0
    for host in ("h0", "h1", "h2"):
        steps = sorted(rng.randrange(0, 5_000) for _ in range(1_500))
        points = truth[host] = []
        at = 0
        while at < len(steps):
            size = rng.randrange(1, 400)
            part = steps[at : at + size]
            at += size
            times, values = [], []
            for step in part:
                clock += 1
                times.append(BASE_US + clock)  # unique: the brute force's order is total
                values.append(rng.choice(special) if rng.random() < 0.05 else rng.gauss(0, 1))
                points.append((step, times[-1], values[-1]))
            columns = MetricColumns(
                name="loss", host=host, steps=part, values=values, times_unix_us=times
            )
            messages.append(_message("run-a", columns))
    rng.shuffle(messages)
    for at in range(0, len(messages), 4):
        await store.repository.store_messages(messages[at : at + 4], {"run-a": "p1"})
    late_steps = [rng.randrange(0, 5_000) for _ in range(300)]  # unordered, overlapping all
    late_times = [BASE_US + 10_000_000 + index for index in range(300)]
    late_values = [rng.gauss(5, 1) for _ in late_steps]
    truth["h1"].extend(zip(late_steps, late_times, late_values, strict=True))
    late = MetricColumns(
        name="loss", host="h1", steps=late_steps, values=late_values, times_unix_us=late_times
    )
    other = MetricColumns(name="acc", host="h1", steps=[1, 2], values=[0.5, 0.6])
    await store.repository.store_messages([_message("run-a", late, other)], {"run-a": "p1"})
    return truth


def _expected(truth: dict[str, list[tuple[int, int, float]]], ids: dict[str, int]) -> list[Point]:
    return sorted(
        (step, ids[host], micros, _bits(value))
        for host, points in truth.items()
        for step, micros, value in points
    )


async def test_pages_and_scans_match_a_brute_force_over_out_of_order_writes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = await _fill(store, random.Random(5))
    ids = await _series_ids(store)
    loss = sorted(ids.values())
    expected = _expected(truth, ids)
    # the late batch made overlapping chunks: the search must widen, not miss them
    assert await store.pool.fetchval("SELECT max(chunk_span) FROM metric_series") > 50
    for limit in (1, 37, 500, 10_000):
        got: list[Point] = []
        after = None
        while True:
            block = await store.repository.read_points("p1", loss, limit, after)
            assert len(block) <= limit
            got.extend(_points(block))
            if len(block) < limit:
                break
            after = (int(block.steps[-1]), int(block.series_ids[-1]), int(block.times_us[-1]))
        assert got == expected, limit
    one = await store.repository.read_points("p1", [ids["h2"]], 10_000, None)
    assert _points(one) == [p for p in expected if p[1] == ids["h2"]]

    monkeypatch.setattr(repository_module, "SCAN_BLOCK_POINTS", 97)
    blocks = [b async for b in store.repository.scan_points("p1", loss, 1_000, 3_999)]
    assert all(0 < len(b) <= 97 for b in blocks)
    assert [p for b in blocks for p in _points(b)] == [
        p for p in expected if 1_000 <= p[0] <= 3_999
    ]
    whole = [
        p async for b in store.repository.scan_points("p1", loss, None, None) for p in _points(b)
    ]
    assert whole == expected
    # another project's read finds nothing (partitions pruned by project)
    assert len(await store.repository.read_points("p2", loss, 10, None)) == 0


async def _check_raw_buckets(
    store: Store,
    truth: dict[str, list[tuple[int, int, float]]],
    ids: dict[str, int],
    groups: dict[int, int],
    width: int,
    first: int,
    last: int,
) -> None:
    rows = await store.repository.read_buckets("p1", groups, width, None, first, last)
    expected: dict[tuple[int, int], list[tuple[int, int, int, float]]] = {}
    for host, points in truth.items():
        for step, micros, value in points:
            if first <= step // width <= last and ids[host] in groups:
                group = groups[ids[host]]
                expected.setdefault((group, step // width), []).append(
                    (step, micros, ids[host], value)
                )
    assert [(r.group, r.bucket) for r in rows] == sorted(expected)
    for row in rows:
        members = sorted(expected[row.group, row.bucket])
        real = [v for *_, v in members if not math.isnan(v)]
        top = members[-1]  # highest step, then latest time, then highest series
        assert (row.count, row.nan_count) == (len(members), len(members) - len(real))
        assert (row.first_step, row.last_step) == (members[0][0], top[0])
        assert (row.last_series_id, _bits(row.last_value)) == (top[2], _bits(top[3]))
        if not real:
            assert (row.min, row.max, row.sum) == (None, None, None)
            continue
        assert (row.min, row.max) == (min(real), max(real))
        assert row.sum is not None
        if math.inf in real and -math.inf in real:
            assert math.isnan(row.sum)
        elif any(math.isinf(v) for v in real):
            assert row.sum == math.fsum(real)
        else:
            assert math.isclose(row.sum, math.fsum(real), rel_tol=1e-9, abs_tol=1e-9)


async def test_raw_buckets_and_point_times_match_a_brute_force(store: Store) -> None:
    truth = await _fill(store, random.Random(8))
    ids = await _series_ids(store)
    width, first, last = 7, 100, 400
    # lines merging series; one series in order (no sort); one with out-of-order writes
    for groups in (
        {ids["h0"]: 0, ids["h1"]: 1, ids["h2"]: 1},
        {ids["h0"]: 0},
        {ids["h1"]: 3},
    ):
        await _check_raw_buckets(store, truth, ids, groups, width, first, last)

    probes = [(ids[host], step) for host, points in truth.items() for step, _, _ in points[::7]]
    probes.append((ids["h0"], 10**9))  # no point there: left out
    times = await store.repository.point_times("p1", probes)
    latest: dict[tuple[int, int], int] = {}
    for host, points in truth.items():
        for step, micros, _ in points:
            key = (ids[host], step)
            latest[key] = max(latest.get(key, 0), micros)
    assert times == {key: latest[key] for key in probes if key in latest}


async def test_a_redelivered_or_doubled_message_is_stored_once(store: Store) -> None:
    columns = MetricColumns(name="loss", steps=[3, 1, 2], values=[1.0, math.nan, -0.0])
    message = _message("run-a", columns)
    first = await store.repository.store_messages([message, message], {"run-a": "p1"})
    again = await store.repository.store_messages([message], {"run-a": "p1"})
    assert (first.points, first.messages, again.points, again.messages) == (3, 1, 0, 0)
    block = await store.repository.read_points(
        "p1", list((await _series_ids(store)).values()), 9, None
    )
    assert block.steps.tolist() == [1, 2, 3]
    assert [_bits(v) for v in block.values.tolist()] == [
        _bits(math.nan),
        _bits(-0.0),
        _bits(1.0),
    ]
    series = await store.pool.fetchrow("SELECT * FROM metric_series")
    assert (series["point_count"], series["first_step"], series["last_step"]) == (3, 1, 3)
    assert series["last_value"] == 1.0


async def test_the_upgrade_converts_every_stored_point_into_chunks(
    database_settings: DatabaseSettings, db_schema: str
) -> None:
    pool = await create_pool(database_settings, db_schema)
    try:
        old = [m for m in _migrations() if (m.component, m.version) != ("run-registry-metrics", 2)]
        await apply_migrations(pool, db_schema, old)
        await pool.execute(
            "INSERT INTO runs (run_id, project, location, display_name, run_set, state,"
            " create_time, update_time) VALUES ('run-a', 'p1', 'l', 'a', 's', 'ACTIVE',"
            " now(), now())"
        )
        rows = await pool.fetch(
            "INSERT INTO metric_series (run_id, metric, host, labels, series_key, point_count)"
            " VALUES ('run-a', 'loss', 'h0', '{}', $1, 0), ('gone', 'loss', 'h0', '{}', $1, 0)"
            " RETURNING series_id",
            series_key("h0", None, {}),
        )
        known, orphan = (row["series_id"] for row in rows)
        rng = random.Random(2)
        points: list[tuple[int, int, int, float]] = []
        for index in range(9_000):  # three chunks of 4096 and a rewritten step
            step = index if index < 8_999 else 17
            value = [math.nan, math.inf, -0.0][index % 3] if index % 100 == 0 else rng.random()
            points.append((known, step, BASE_US + index, value))
        points += [(orphan, step, BASE_US, float(step)) for step in (5, 3, 4)]
        points.append((987_654, 1, BASE_US, 1.0))  # a series row lost long ago
        await pool.copy_records_to_table(
            "metric_points",
            records=points,
            columns=("series_id", "step", "time_us", "value"),
            schema_name=db_schema,
        )
        await apply_migrations(pool, db_schema, _migrations())

        assert await pool.fetchval("SELECT to_regclass('metric_points')") is None
        repository = MetricsRepository(pool, db_schema)
        got = await repository.read_points("p1", [known], 10_000, None)
        assert _points(got) == sorted((s, i, t, _bits(v)) for i, s, t, v in points if i == known)
        unknown = await repository.read_points("", [orphan], 10, None)
        assert unknown.steps.tolist() == [3, 4, 5]
        # points without a series row are unreadable, yet kept (in the project '')
        assert (
            await pool.fetchval("SELECT project FROM metric_chunks WHERE series_id = 987654") == ""
        )
        assert await pool.fetchval("SELECT sum(point_count) FROM metric_chunks") == len(points)
        assert await pool.fetchval("SELECT DISTINCT codec FROM metric_chunks") == 0
        partitions = await pool.fetch(
            "SELECT table_name, project, first_day, end_day FROM metric_chunk_partitions"
            " ORDER BY project"
        )
        assert [row["project"] for row in partitions] == ["", "p1"]
        for row in partitions:
            assert row["table_name"] == partition_name(row["project"], row["first_day"])
            assert row["first_day"] % 7 == 0 and row["end_day"] == row["first_day"] + 7
        spans = await pool.fetch("SELECT series_id, chunk_span FROM metric_series")
        # (step 17 rewritten last sorts into the first chunk: 0 … 4094, then 4095 … 8190)
        assert {row["series_id"]: row["chunk_span"] for row in spans} == {known: 4_095, orphan: 2}
        # new writes after the upgrade land beside the converted chunks
        more = MetricColumns(name="loss", host="h0", steps=[9_000], values=[2.0])
        await repository.store_messages([_message("run-a", more)], {"run-a": "p1"})
        last = await repository.read_points("p1", [known], 1, (8_998, known, 2**62))
        assert last.steps.tolist() == [9_000]
    finally:
        await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
        await pool.close()


async def _store_on(store: Store, day: int, run_id: str, project: str, step: int) -> None:
    store.clock.day = day
    columns = MetricColumns(name="loss", steps=[step, step + 1], values=[1.0, 2.0])
    await store.repository.store_messages([_message(run_id, columns)], {run_id: project})


async def _steps(store: Store, project: str) -> list[int]:
    ids = [r["series_id"] for r in await store.pool.fetch("SELECT series_id FROM metric_series")]
    return sorted((await store.repository.read_points(project, ids, 100, None)).steps.tolist())


async def test_expiry_drops_whole_old_partitions_of_one_project_only(store: Store) -> None:
    week = DAY - DAY % 7
    await _store_on(store, week, "run-a", "p1", 0)
    await _store_on(store, week + 6, "run-a", "p1", 10)  # same partition
    await _store_on(store, week + 7, "run-a", "p1", 20)
    await _store_on(store, week, "run-b", "p2", 30)
    assert await store.repository.expire_points("p1", week + 6) == 0  # not all of it is old
    assert await store.repository.expire_points("p1", week + 7) == 1
    assert await _steps(store, "p1") == [20, 21]
    assert await _steps(store, "p2") == [30, 31]
    assert (
        await store.pool.fetchval(
            "SELECT count(*) FROM metric_chunk_partitions WHERE project = 'p1'"
        )
        == 1
    )
    assert await store.pool.fetchval("SELECT to_regclass($1)", partition_name("p1", week)) is None
    assert await store.repository.expire_points("p1", week + 7) == 0
    # rollups and series stay: charts of expired raw points still draw from rollups
    assert await store.pool.fetchval("SELECT count(*) FROM metric_rollups") > 0
    # a late write for the expired week makes its partition again (the cache forgot it)
    await _store_on(store, week, "run-a", "p1", 40)
    assert await _steps(store, "p1") == [20, 21, 40, 41]


async def test_a_replica_that_missed_an_expiry_recreates_the_partition(store: Store) -> None:
    other = MetricsRepository(store.pool, store.schema, clock=store.clock)
    await _store_on(store, DAY, "run-a", "p1", 0)
    await store.repository.expire_points("p1", DAY + 7)  # `other` still thinks it exists
    store.repository = other
    await _store_on(store, DAY, "run-a", "p1", 5)
    assert await _steps(store, "p1") == [5, 6]


async def test_replicas_create_a_new_partition_at_once_without_failing(store: Store) -> None:
    replicas = [MetricsRepository(store.pool, store.schema, clock=store.clock) for _ in range(3)]
    columns = MetricColumns(name="loss", steps=[1], values=[1.0])
    results = await asyncio.gather(
        *(
            replica.store_messages([_message(f"run-{index}", columns)], {f"run-{index}": "new"})
            for index, replica in enumerate(replicas)
        )
    )
    assert [result.points for result in results] == [1, 1, 1]
    assert (
        await store.pool.fetchval(
            "SELECT count(*) FROM metric_chunk_partitions WHERE project = 'new'"
        )
        == 1
    )


async def test_purging_a_run_removes_all_its_metric_rows_and_nothing_else(store: Store) -> None:
    await _fill(store, random.Random(3))
    kept = MetricColumns(name="loss", steps=list(range(120)), values=[1.0] * 120)
    await store.repository.store_messages([_message("run-b", kept)], {"run-b": "p1"})
    stored = await store.pool.fetchval(
        "SELECT sum(point_count) FROM metric_series WHERE run_id = 'run-a'"
    )
    ledger = await store.pool.fetchval(
        "SELECT count(*) FROM metric_messages WHERE run_id = 'run-a'"
    )
    assert await store.repository.purge_run("run-a") == stored
    assert (
        await store.pool.fetchval("SELECT count(*) FROM metric_series WHERE run_id = 'run-a'") == 0
    )
    # the ledger stays: a late redelivery of the purged run's messages stores nothing
    assert (
        await store.pool.fetchval("SELECT count(*) FROM metric_messages WHERE run_id = 'run-a'")
        == ledger
    )
    ids = [r["series_id"] for r in await store.pool.fetch("SELECT series_id FROM metric_series")]
    assert (
        await store.pool.fetchval(
            "SELECT count(*) FROM metric_rollups WHERE NOT series_id = ANY($1::bigint[])", ids
        )
        == 0
    )
    assert await store.pool.fetchval("SELECT sum(point_count) FROM metric_chunks") == 120
    assert (await store.repository.read_points("p1", ids, 1_000, None)).steps.tolist() == list(
        range(120)
    )
    assert await store.repository.purge_run("run-a") == 0


async def test_a_message_redelivered_after_its_run_was_purged_stores_nothing(
    store: Store,
) -> None:
    message = _message("run-c", MetricColumns(name="loss", steps=[1, 2], values=[0.5, 0.25]))
    assert (await store.repository.store_messages([message], {"run-c": "p1"})).points == 2
    assert await store.repository.purge_run("run-c") == 2
    again = await store.repository.store_messages([message], {"run-c": "p1"})
    assert (again.points, again.messages) == (0, 0)
    assert await store.repository.list_series(["run-c"], None) == []


async def test_compaction_merges_small_chunks_without_changing_a_point(store: Store) -> None:
    week = DAY - DAY % 7
    rng = random.Random(4)
    for day, first in ((week, 0), (week + 1, 500), (week + 8, 1_000)):  # two partitions
        store.clock.day = day
        for start in range(first, first + 500, 10):  # a live run: ten steps per batch
            steps = list(range(start, start + 10))
            if start == first + 250:
                steps = [rng.randrange(0, 1_500) for _ in range(10)]  # a late, unordered write
            columns = MetricColumns(
                name="loss",
                steps=steps,
                values=[rng.gauss(0, 1) for _ in steps],
                # distinct times: a keyset page cannot split points equal in (step, time)
                times_unix_us=[BASE_US + day * 10_000 + start + i for i in range(10)],
            )
            await store.repository.store_messages([_message("run-a", columns)], {"run-a": "p1"})
    other = MetricColumns(name="loss", steps=[1, 2], values=[1.0, 2.0])
    for _ in range(2):
        await store.repository.store_messages([_message("run-b", other)], {"run-b": "p2"})
    series = [r["series_id"] for r in await store.pool.fetch("SELECT series_id FROM metric_series")]
    before = await store.repository.read_points("p1", series, 10_000, None)
    chunks_before = await store.pool.fetchval("SELECT count(*) FROM metric_chunks")
    days_before = await store.pool.fetch(
        "SELECT DISTINCT stored_day - stored_day % 7 AS week FROM metric_chunks ORDER BY 1"
    )

    merged = await store.repository.compact_chunks("p1", small=256)
    assert merged > 100
    assert await store.pool.fetchval("SELECT count(*) FROM metric_chunks") == chunks_before - merged
    after = await store.repository.read_points("p1", series, 10_000, None)
    assert _points(after) == _points(before)
    assert len(after) == 1_500
    # chunks stay in their partition (week), and other projects are left alone
    days_after = await store.pool.fetch(
        "SELECT DISTINCT stored_day - stored_day % 7 AS week FROM metric_chunks ORDER BY 1"
    )
    assert days_after == days_before
    assert await store.pool.fetchval("SELECT count(*) FROM metric_chunks WHERE project = 'p2'") == 2
    assert await store.repository.compact_chunks("p1", small=256) == 0
    # pages across the rewritten chunks still find every point, one at a time too
    got: list[Point] = []
    after_position = None
    while True:
        block = await store.repository.read_points("p1", series, 97, after_position)
        got.extend(_points(block))
        if len(block) < 97:
            break
        after_position = (
            int(block.steps[-1]),
            int(block.series_ids[-1]),
            int(block.times_us[-1]),
        )
    assert got == _points(before)


async def test_a_scan_never_splits_points_equal_in_step_and_time_between_blocks(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repository_module, "SCAN_BLOCK_POINTS", 4)
    # no times: every point of a message has the message's time, and steps come twice
    for values in ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]):
        columns = MetricColumns(name="loss", steps=[1, 2, 2], values=values)
        await store.repository.store_messages([_message("run-a", columns)], {"run-a": "p1"})
    series = [r["series_id"] for r in await store.pool.fetch("SELECT series_id FROM metric_series")]
    blocks = [b async for b in store.repository.scan_points("p1", series, None, None)]
    assert sorted(v for b in blocks for v in b.values.tolist()) == [float(v) for v in range(1, 10)]
    assert [len(b) for b in blocks] == [3, 6]  # step 1 three times, then step 2 six times


async def test_pruning_the_ledger_forgets_only_older_messages(store: Store) -> None:
    old, new = (
        _message("run-a", MetricColumns(name="loss", steps=[step], values=[1.0])) for step in (1, 2)
    )
    await store.repository.store_messages([old], {"run-a": "p1"})
    await store.pool.execute("UPDATE metric_messages SET stored_at = now() - interval '2 days'")
    await store.repository.store_messages([new], {"run-a": "p1"})
    cutoff = await store.pool.fetchval("SELECT now() - interval '1 day'")
    assert await store.repository.prune_ledger(cutoff) == 1
    assert await store.repository.prune_ledger(cutoff) == 0
    # the newer message is still known: its redelivery stores nothing
    assert (await store.repository.store_messages([new], {"run-a": "p1"})).points == 0

"""The retention sweep with a fake clock: whole point partitions of a project older than
its policy are dropped and nothing else (newer weeks, other projects, rollups that still
draw the chart); metric data of runs that ended long ago expires once; runs deleted long
ago are purged; one replica sweeps at a time (real NATS and PostgreSQL)."""

from datetime import UTC, datetime, timedelta

import pytest

from conftest import ApiTokens
from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.app import create_app
from mldiag_run_registry.retention.service import day_number
from mldiag_schemas.auth import Role
from run_registry.helpers import RegistrySettings
from run_registry.retention.conftest import Retention
from run_registry.retention.seeding import chunks_of, new_run, series_of, store_points
from support import serving, wait_until

pytestmark = pytest.mark.connected

TODAY = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
EPOCH = datetime(1970, 1, 1, 12, tzinfo=UTC)


def _runs(project: str) -> str:
    return f"/v1/projects/{project}/locations/local/machineLearningRuns"


async def _set_policy(retention: Retention, project: str, **days: int) -> None:
    response = await retention.api.patch(
        f"/v1/projects/{project}/locations/local/retentionPolicy", json=days
    )
    assert response.status_code == 200, response.text


async def _partitions(retention: Retention, project: str) -> list[tuple[int, int]]:
    rows = await retention.pool.fetch(
        "SELECT first_day, end_day FROM metric_chunk_partitions WHERE project = $1"
        " ORDER BY first_day",
        project,
    )
    return [(row["first_day"], row["end_day"]) for row in rows]


async def test_old_point_partitions_go_and_nothing_else(retention: Retention) -> None:
    await _set_policy(retention, "p1", rawPointsDays=14, rollupsDays=365)
    long_ago = TODAY - timedelta(days=40)
    for project in ("p1", "p2"):  # p2 has no policy: it keeps its points
        await new_run(retention, f"{project}-old", project)
        await store_points(retention, f"{project}-old", project, stored_at=long_ago)
        await new_run(retention, f"{project}-new", project)
        await store_points(retention, f"{project}-new", project, stored_at=TODAY)
    old_week, new_week = await _partitions(retention, "p1")
    assert old_week[0] <= day_number(long_ago) < old_week[1]
    series = {run: await series_of(retention, run) for run in ("p1-old", "p1-new", "p2-old")}

    # a partition goes once its last day is rawPointsDays old: not a day before
    last_day = old_week[1]
    just_before = EPOCH + timedelta(days=last_day - 1 + 14)
    summary = await retention.sweeper.sweep(just_before)
    assert summary.partitions_dropped == 0
    assert await _partitions(retention, "p1") == [old_week, new_week]

    summary = await retention.sweeper.sweep(just_before + timedelta(days=1))
    assert (summary.partitions_dropped, summary.runs_expired, summary.runs_purged) == (1, 0, 0)
    assert await _partitions(retention, "p1") == [new_week]
    assert await chunks_of(retention, series["p1-old"]) == 0
    assert await chunks_of(retention, series["p1-new"]) > 0
    assert await chunks_of(retention, series["p2-old"]) > 0  # another project's: kept
    assert len(await _partitions(retention, "p2")) == 2

    # the chart still draws from rollups; the series still says what was recorded
    chart = await retention.api.get(f"{_runs('p1')}/p1-old/metrics/loss", params={"buckets": 10})
    assert chart.status_code == 200, chart.text
    body = chart.json()
    assert body["source"].startswith("rollup")
    (line,) = body["series"]
    assert sum(bucket["count"] for bucket in line["buckets"]) == 1000
    assert line["buckets"][-1]["lastStep"] == 999
    listed = await retention.api.get(f"{_runs('p1')}/p1-old/metrics")
    assert listed.json()["metrics"]


async def test_metric_data_of_runs_ended_long_ago_expires_once(retention: Retention) -> None:
    await _set_policy(retention, "p1", rawPointsDays=7, rollupsDays=60)
    await new_run(retention, "ended", "p1", runPhase="COMPLETED")
    await new_run(retention, "live", "p1")
    await new_run(retention, "other-project", "p2", runPhase="COMPLETED")
    for run_id, project in (("ended", "p1"), ("live", "p1"), ("other-project", "p2")):
        await store_points(retention, run_id, project)

    summary = await retention.sweeper.sweep(TODAY + timedelta(days=59))
    assert summary.runs_expired == 0
    assert await series_of(retention, "ended")

    summary = await retention.sweeper.sweep(TODAY + timedelta(days=61))
    assert summary.runs_expired == 1
    assert await series_of(retention, "ended") == []
    assert await series_of(retention, "live")  # never ended: only its points' weeks go
    assert await series_of(retention, "other-project")  # no policy there
    run = await retention.api.get(f"{_runs('p1')}/ended")
    assert run.status_code == 200  # the run itself stays
    metrics = await retention.api.get(f"{_runs('p1')}/ended/metrics")
    assert metrics.json().get("metrics", []) == []

    again = await retention.sweeper.sweep(TODAY + timedelta(days=62))
    assert again.runs_expired == 0  # each run expires once


async def test_small_chunks_are_compacted_and_old_ledger_ids_forgotten(
    retention: Retention,
) -> None:
    await new_run(retention, "live", "p3")  # no policy: compaction still happens
    for _ in range(4):  # a live run's few steps per batch: a small chunk per batch
        await store_points(retention, "live", "p3", steps=10)
    series = await series_of(retention, "live")
    small = await chunks_of(retention, series)
    assert small == 8  # 4 batches x 2 metrics

    summary = await retention.sweeper.sweep(TODAY)
    assert summary.chunks_compacted == small - len(series)
    assert await chunks_of(retention, series) == len(series)
    assert summary.ledger_pruned == 0  # ids stored today are kept

    summary = await retention.sweeper.sweep(TODAY + timedelta(days=31))
    assert summary.ledger_pruned == 4
    assert await retention.pool.fetchval("SELECT count(*) FROM metric_messages") == 0


async def test_runs_deleted_long_ago_are_purged(retention: Retention) -> None:
    await _set_policy(retention, "keep", deletedRunsDays=0)  # deleted runs kept forever
    await _set_policy(retention, "short", deletedRunsDays=3)
    for project in ("default", "keep", "short"):  # default: no policy, 30 days
        for run_id in (f"{project}-deleted", f"{project}-live"):
            await new_run(retention, run_id, project)
            await store_points(retention, run_id, project)
        deleted = await retention.api.delete(f"{_runs(project)}/{project}-deleted")
        assert deleted.status_code == 200, deleted.text

    async def present() -> set[str]:
        rows = await retention.pool.fetch("SELECT run_id FROM runs")
        return {row["run_id"] for row in rows}

    everything = await present()
    assert (await retention.sweeper.sweep(TODAY + timedelta(days=2))).runs_purged == 0
    assert await present() == everything

    assert (await retention.sweeper.sweep(TODAY + timedelta(days=4))).runs_purged == 1
    assert await present() == everything - {"short-deleted"}
    assert await series_of(retention, "short-deleted") == []
    assert await series_of(retention, "short-live")

    summary = await retention.sweeper.sweep(TODAY + timedelta(days=31))
    assert summary.runs_purged == 1
    assert await present() == everything - {"short-deleted", "default-deleted"}


async def test_one_replica_sweeps_at_a_time(retention: Retention) -> None:
    await _set_policy(retention, "short", deletedRunsDays=1)
    await new_run(retention, "gone", "short")
    assert (await retention.api.delete(f"{_runs('short')}/gone")).status_code == 200
    later = TODAY + timedelta(days=2)
    async with retention.repository.sweeping_alone() as alone:  # another replica sweeping
        assert alone
        summary = await retention.sweeper.sweep(later)
        assert summary.skipped
        assert summary.runs_purged == 0
    summary = await retention.sweeper.sweep(later)
    assert not summary.skipped
    assert summary.runs_purged == 1


async def test_the_registry_sweeps_in_the_background(
    registry_settings_with: RegistrySettings,
    api_tokens: ApiTokens,
    database_settings: DatabaseSettings,
    db_schema: str,
) -> None:
    """The registry's own sweep, every retention_sweep_seconds: a run deleted longer ago than
    its project's period disappears without anyone asking; a recent one stays."""
    settings = registry_settings_with(retention_sweep_seconds=0.2)
    async with serving(create_app(settings), api_tokens.headers(Role.ADMIN)) as api:
        pool = await create_pool(database_settings, db_schema)
        try:
            policy = await api.patch(
                "/v1/projects/p1/locations/local/retentionPolicy", json={"deletedRunsDays": 2}
            )
            assert policy.status_code == 200, policy.text
            for run_id in ("old", "recent"):
                body = {"runId": run_id, "displayName": run_id}
                assert (await api.post(_runs("p1"), json=body)).status_code == 200
                assert (await api.delete(f"{_runs('p1')}/{run_id}")).status_code == 200
            await pool.execute(
                "UPDATE runs SET delete_time = now() - interval '3 days' WHERE run_id = 'old'"
            )

            async def remaining() -> set[str]:
                return {row["run_id"] for row in await pool.fetch("SELECT run_id FROM runs")}

            left = await wait_until(remaining, lambda runs: "old" not in runs, timeout=10)
            assert left == {"recent"}
        finally:
            await pool.close()

"""Purging a run deleted for good: every row and file of that run goes and nothing of
another run; twice is a no-op; a live run is refused; an interrupted purge is finished by
the next (real NATS, PostgreSQL and local object storage)."""

import pytest

from conftest import ApiTokens
from mldiag_platform.storage import FileStore
from mldiag_run_registry.retention.errors import RunNotDeleted
from mldiag_schemas.auth import Role
from run_registry.retention.conftest import Retention
from run_registry.retention.seeding import chunks_of, files_of, rows_of, seed, series_of

pytestmark = pytest.mark.connected

RUNS = "/v1/projects/default/locations/local/machineLearningRuns"


class MetricsFailing:
    """The real metric store, whose purge fails once (a crash half way through a purge)."""

    def __init__(self, retention: Retention) -> None:
        self._metrics = retention.metrics
        self.failed = False

    async def expire_points(self, project: str, before_day: int) -> int:
        return int(await self._metrics.expire_points(project, before_day))

    async def purge_run(self, run_id: str) -> int:
        if not self.failed:
            self.failed = True
            raise ConnectionError("the database went away")
        return int(await self._metrics.purge_run(run_id))


async def _delete(retention: Retention, run_id: str) -> None:
    response = await retention.api.delete(f"{RUNS}/{run_id}")
    assert response.status_code == 200, response.text


async def test_purge_removes_every_row_and_file_of_the_run_and_nothing_else(
    retention: Retention,
) -> None:
    await seed(retention, "run-a")
    await seed(retention, "run-b")
    rows_b, files_b = await rows_of(retention, "run-b"), await files_of(retention, "run-b")
    assert all(rows_b.values()), rows_b  # every table holds something of each run
    assert len(files_b) == 2
    series_a = await series_of(retention, "run-a")
    assert await chunks_of(retention, series_a) > 0
    await _delete(retention, "run-a")

    response = await retention.api.post(f"{RUNS}/run-a:purge")
    assert response.status_code == 200, response.text
    purged = response.json()
    assert purged["name"] == "projects/default/locations/local/machineLearningRuns/run-a"
    assert purged["metricPoints"] == 2000
    assert (purged["events"], purged["analyses"], purged["logChunks"]) == (2, 2, 3)
    assert (purged["heartbeats"], purged["profilerTargets"]) == (2, 2)
    assert (purged["profilerSessions"], purged["objects"]) == (1, 2)
    assert purged["operations"] == 3  # create, delete, and the capture of its session

    assert await rows_of(retention, "run-a") == dict.fromkeys(rows_b, 0)
    ledger = "SELECT count(*) FROM metric_messages WHERE run_id = 'run-a'"
    assert await retention.pool.fetchval(ledger) > 0  # a late redelivery stores nothing
    assert await chunks_of(retention, series_a) == 0
    assert await files_of(retention, "run-a") == []
    assert await rows_of(retention, "run-b") == rows_b
    assert await files_of(retention, "run-b") == files_b
    assert (await retention.api.get(f"{RUNS}/run-b/metrics")).json()["metrics"]

    # twice: nothing left to purge, nothing else touched
    again = await retention.api.post(f"{RUNS}/run-a:purge")
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "run_not_found"
    assert await retention.purger.purge("run-a") is None
    assert await rows_of(retention, "run-b") == rows_b
    # the id is free again once purged
    recreated = await retention.api.post(RUNS, json={"runId": "run-a", "displayName": "again"})
    assert recreated.status_code == 200, recreated.text


async def test_a_live_run_is_never_purged(retention: Retention, api_tokens: ApiTokens) -> None:
    await seed(retention, "run-live")
    before = await rows_of(retention, "run-live")
    refused = await retention.api.post(f"{RUNS}/run-live:purge")
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "run_not_deleted"
    with pytest.raises(RunNotDeleted):
        await retention.purger.purge("run-live")
    assert await rows_of(retention, "run-live") == before
    missing = await retention.api.post(f"{RUNS}/never-was:purge")
    assert missing.status_code == 404

    await _delete(retention, "run-live")
    before = await rows_of(retention, "run-live")
    for role in (Role.VIEWER, Role.EDITOR):  # purging is for admins
        denied = await retention.api.post(
            f"{RUNS}/run-live:purge", headers=api_tokens.headers(role)
        )
        assert denied.status_code == 403
    assert await rows_of(retention, "run-live") == before


async def test_an_interrupted_purge_is_finished_by_the_next(retention: Retention) -> None:
    await seed(retention, "run-a")
    await seed(retention, "run-b")
    rows_b = await rows_of(retention, "run-b")
    await _delete(retention, "run-a")

    failing = MetricsFailing(retention)
    with pytest.raises(ConnectionError):
        await retention.purger_with(failing).purge("run-a")
    half = await rows_of(retention, "run-a")
    assert half["runs"] == 1  # still there, deleted: the next purge finds it
    assert half["profiler_sessions"] == 0  # what went first is gone
    assert await files_of(retention, "run-a") == []

    purged = await retention.purger_with(failing).purge("run-a")
    assert purged is not None
    assert purged.objects == 0  # removed by the first try
    assert await rows_of(retention, "run-a") == dict.fromkeys(rows_b, 0)
    assert await rows_of(retention, "run-b") == rows_b


async def test_files_outside_the_runs_profile_folder_are_left_alone(
    retention: Retention,
) -> None:
    """A session whose reported folder is the storage root must not empty the storage."""
    await seed(retention, "run-a")
    await seed(retention, "run-b")
    await retention.pool.execute(
        "UPDATE profiler_sessions SET storage_folder_uri = $2 WHERE run_id = $1",
        "run-a",
        f"file://{retention.storage}",
    )
    await retention.pool.execute(
        "UPDATE profiler_session_hosts SET file_uri = $2 WHERE run_id = $1 AND host = 'h0'",
        "run-a",
        f"file://{retention.storage}/run-b/plugins/profile/session-1/h0.xplane.pb",
    )
    await _delete(retention, "run-a")
    purged = await retention.purger.purge("run-a")
    assert purged is not None
    assert purged.objects == 1  # run-a's h1 file, under its own folder
    assert len(await files_of(retention, "run-b")) == 2
    assert await FileStore(retention.storage).list("run-a/") == [
        "run-a/plugins/profile/session-1/h0.xplane.pb"
    ]

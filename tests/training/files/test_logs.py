"""Replicas' logs over HTTP against real storage (file:// and the GCS emulator), PostgreSQL
and NATS: read whole, by range and tail; followed while they grow, across restarts, and
ended with the job; bad requests refused with 4xx naming what is wrong."""

import asyncio
from typing import Any

import asyncpg
import httpx
import pytest

from mldiag_schemas.auth import Role
from mldiag_schemas.files import LogStream
from mldiag_schemas.jobs import JobState
from mldiag_training.files.repository import FilesRepository
from mldiag_training.files.service import LogsService, log_key
from training.files.conftest import BOTH_STORAGES, FilesApi
from training.jobs.test_validation import container_pool, sdk_job

pytestmark = pytest.mark.connected


async def _job(api: FilesApi, pools: int = 1) -> str:
    body = sdk_job(
        workerPoolSpecs=[container_pool(replicas="1" if p == 0 else "2") for p in range(pools)]
    )
    response = await api.client.post("/v1/customJobs", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["name"]).rsplit("/", 1)[-1]


async def _write(
    api: FilesApi, job: str, data: bytes, stream: LogStream = LogStream.STDOUT, **where: Any
) -> None:
    """What the executor does: (re)write the attempt's log with everything so far."""
    key = log_key(job, where.get("replica", "workerpool0-0"), where.get("attempt", 0), stream)
    await api.store.put(key, data)


async def _end(db: asyncpg.Pool, job: str, state: JobState = JobState.SUCCEEDED) -> None:
    await db.execute(
        "UPDATE custom_jobs SET state = $2, end_time = now() WHERE job_id = $1", job, state.value
    )


async def _replica(db: asyncpg.Pool, job: str, attempt: int, state: str) -> None:
    """What the scheduler keeps: the chief's current attempt."""
    await db.execute(
        "INSERT INTO replicas (job_id, pool, index, attempt, state) VALUES ($1, 0, 0, $2, $3)"
        " ON CONFLICT (job_id, pool, index) DO UPDATE SET attempt = $2, state = $3",
        job,
        attempt,
        state,
    )


@BOTH_STORAGES
async def test_a_log_is_read_whole_by_range_and_by_tail(
    files_api: FilesApi, training_db: asyncpg.Pool
) -> None:
    job = await _job(files_api)
    await _write(files_api, job, b"step 1\nstep 2\n")
    await _write(files_api, job, b"warning\n", LogStream.STDERR)
    logs = f"/v1/customJobs/{job}/logs"

    both = await files_api.client.get(logs)
    assert both.status_code == 200
    assert both.text == "step 1\nstep 2\nwarning\n"  # stdout, then stderr
    assert both.headers["content-type"].startswith("text/plain")
    assert both.headers["mldiag-log-replica"] == "workerpool0-0"
    assert both.headers["mldiag-log-attempt"] == "0"
    assert both.headers["mldiag-log-ended"] == "false"  # QUEUED: it has not even started

    stdout = await files_api.client.get(logs, params={"stream": "stdout"})
    assert stdout.text == "step 1\nstep 2\n"
    assert stdout.headers["mldiag-log-next-offset"] == "14"
    await _write(files_api, job, b"step 1\nstep 2\nstep 3\n")
    more = await files_api.client.get(logs, params={"stream": "stdout", "offset": "14"})
    assert more.text == "step 3\n"
    assert more.headers["mldiag-log-next-offset"] == "21"

    whole = await files_api.client.get(logs, params={"offset": "0"})  # 0 is every stream's start
    assert whole.text == "step 1\nstep 2\nstep 3\nwarning\n"
    tail = await files_api.client.get(logs, params={"offset": "-7"})
    assert tail.text == "step 3\narning\n"  # the last 7 bytes of each stream
    long_form = f"/v1/projects/default/locations/local/customJobs/{job}/logs"
    stderr = await files_api.client.get(long_form, params={"stream": "stderr"})
    assert stderr.text == "warning\n"

    await _end(training_db, job)
    ended = await files_api.client.get(logs, params={"stream": "stdout", "offset": "21"})
    assert (ended.text, ended.headers["mldiag-log-ended"]) == ("", "true")


async def test_a_log_not_written_yet_is_empty(files_api: FilesApi) -> None:
    job = await _job(files_api)
    response = await files_api.client.get(f"/v1/customJobs/{job}/logs")
    assert (response.status_code, response.text) == (200, "")


BAD_REQUESTS = (
    ({"replica": "chief"}, 400, "invalid_replica"),
    ({"replica": "workerpool9-0"}, 400, "invalid_replica"),
    ({"replica": "workerpool1-0"}, 404, "replica_not_found"),
    ({"replica": "workerpool0-1"}, 404, "replica_not_found"),
    ({"attempt": "2"}, 404, "attempt_not_found"),
    ({"attempt": "-1"}, 400, "invalid_argument"),
    ({"stream": "stdin"}, 400, "invalid_log_range"),
    ({"offset": "ten"}, 400, "invalid_log_range"),
    ({"offset": "3"}, 400, "invalid_log_range"),  # a positive offset names one stream
    ({"stream": "stdout", "offset": "99"}, 400, "invalid_log_range"),  # past the end
)
"""(query, HTTP status, mldiag reason) of a log request refused."""


async def test_bad_log_requests_are_refused(files_api: FilesApi) -> None:
    job = await _job(files_api)
    await _write(files_api, job, b"abc\n")
    for params, status, reason in BAD_REQUESTS:
        response = await files_api.client.get(f"/v1/customJobs/{job}/logs", params=params)
        assert response.status_code == status, (params, response.text)
        error = response.json()["error"]
        assert error["details"][0]["reason"] == reason, params
        assert error["message"]


async def test_unknown_jobs_bad_ids_and_callers(files_api: FilesApi) -> None:
    missing = await files_api.client.get("/v1/customJobs/123/logs")
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"
    bad = await files_api.client.get("/v1/customJobs/Not_An_Id/logs")
    assert bad.status_code == 400
    other = await files_api.client.get(
        f"/v1/projects/other/locations/local/customJobs/{await _job(files_api)}/logs"
    )
    assert other.status_code == 404  # the job lives under another parent
    job = await _job(files_api)
    path = f"/v1/customJobs/{job}/logs"
    viewer = await files_api.client.get(path, headers=files_api.tokens.headers(Role.VIEWER))
    assert viewer.status_code == 200  # reading logs is customJobs.get
    anonymous = await files_api.client.get(path, headers={"Authorization": ""})
    assert anonymous.status_code == 401


async def _follow(api: FilesApi, job: str, **params: str) -> tuple[httpx.Headers, list[bytes]]:
    chunks: list[bytes] = []
    async with api.client.stream(
        "GET", f"/v1/customJobs/{job}/logs", params={"follow": "true", **params}, timeout=30
    ) as response:
        assert response.status_code == 200
        chunks.extend([chunk async for chunk in response.aiter_raw()])
    return response.headers, chunks


@BOTH_STORAGES
async def test_a_followed_log_streams_new_lines_until_the_job_ends(
    files_api: FilesApi, training_db: asyncpg.Pool
) -> None:
    job = await _job(files_api)
    await _replica(training_db, job, 0, "RUNNING")
    await _write(files_api, job, b"first\n")
    following = asyncio.create_task(_follow(files_api, job))
    await asyncio.sleep(0.3)
    await _write(files_api, job, b"first\nsecond\nhalf a li")
    await _write(files_api, job, b"oops\n", LogStream.STDERR)
    await asyncio.sleep(0.3)
    assert not following.done()  # still running: still following
    await _write(files_api, job, b"first\nsecond\nhalf a line\nlast\n")
    await _replica(training_db, job, 0, "SUCCEEDED")
    await _end(training_db, job)
    headers, chunks = await asyncio.wait_for(following, 10)
    text = b"".join(chunks).decode()
    # lines of the two streams are never cut into each other
    assert sorted(text.splitlines()) == ["first", "half a line", "last", "oops", "second"]
    assert text.index("second") < text.index("half a line") < text.index("last")
    assert headers["mldiag-log-replica"] == "workerpool0-0"
    assert "mldiag-log-next-offset" not in headers


async def test_following_an_ended_job_answers_at_once(
    files_api: FilesApi, training_db: asyncpg.Pool
) -> None:
    job = await _job(files_api)
    await _write(files_api, job, b"all done\n")
    await _end(training_db, job, JobState.FAILED)
    headers, chunks = await asyncio.wait_for(_follow(files_api, job, stream="stdout"), 5)
    assert b"".join(chunks) == b"all done\n"
    assert headers["mldiag-log-ended"] == "true"


async def test_following_a_replica_goes_on_through_its_restarts(
    files_api: FilesApi, training_db: asyncpg.Pool
) -> None:
    job = await _job(files_api)
    await _replica(training_db, job, 0, "RUNNING")
    await _write(files_api, job, b"attempt zero\n")
    following = asyncio.create_task(_follow(files_api, job, stream="stdout"))
    await asyncio.sleep(0.3)
    await _write(files_api, job, b"attempt zero\ncrash\n")
    # It exited: the scheduler keeps the next attempt, waiting out its backoff.
    await _replica(training_db, job, 1, "RESTARTING")
    await asyncio.sleep(0.3)
    assert not following.done()
    # Meanwhile a plain read shows the attempt that ended, not the empty next one.
    latest = await files_api.client.get(f"/v1/customJobs/{job}/logs")
    assert (latest.text, latest.headers["mldiag-log-attempt"]) == ("attempt zero\ncrash\n", "0")
    await _replica(training_db, job, 1, "RUNNING")
    await _write(files_api, job, b"attempt one\n", attempt=1)
    await asyncio.sleep(0.3)
    await _replica(training_db, job, 1, "SUCCEEDED")
    await _end(training_db, job)
    _, chunks = await asyncio.wait_for(following, 10)
    assert b"".join(chunks).decode() == (
        "attempt zero\ncrash\n==> workerpool0-0 attempt 1 <==\nattempt one\n"
    )
    now = await files_api.client.get(f"/v1/customJobs/{job}/logs")
    assert (now.text, now.headers["mldiag-log-attempt"]) == ("attempt one\n", "1")

    # a named attempt stays on it
    _, pinned = await asyncio.wait_for(_follow(files_api, job, attempt="0", stream="stdout"), 5)
    assert b"".join(pinned) == b"attempt zero\ncrash\n"


@BOTH_STORAGES
async def test_the_stored_logs_are_listed(files_api: FilesApi, training_db: asyncpg.Pool) -> None:
    job = await _job(files_api, pools=2)
    await _write(files_api, job, b"12345", replica="workerpool1-1")
    await _write(files_api, job, b"1", attempt=1)
    await _write(files_api, job, b"12", LogStream.STDERR)
    await files_api.store.put(f"jobs/{job}/logs/workerpool0-0/attempt-0/core.dump", b"x")
    response = await files_api.client.get(f"/v1/customJobs/{job}/logs:list")
    assert response.status_code == 200, response.text
    logs = response.json()["logs"]
    assert [(log["replica"], log["attempt"], log["stream"], log["sizeBytes"]) for log in logs] == [
        ("workerpool0-0", 0, "stderr", "2"),
        ("workerpool0-0", 1, "stdout", "1"),
        ("workerpool1-1", 0, "stdout", "5"),
    ]
    assert (
        logs[0]["uri"]
        == f"{files_api.store.url}/jobs/{job}/logs/workerpool0-0/attempt-0/stderr.log"
    )
    missing = await files_api.client.get("/v1/customJobs/42/logs:list")
    assert missing.status_code == 404
    del training_db


async def test_a_silent_follow_ends_when_its_reader_leaves(
    files_api: FilesApi, training_db: asyncpg.Pool
) -> None:
    """Nothing is sent while a job is queued, so a reader gone is noticed by asking, every
    poll (the route asks whether the client disconnected or the server stops)."""
    job = await _job(files_api)
    logs = LogsService(FilesRepository(training_db), files_api.store, poll_seconds=0.01)
    target = await logs.target("default", "local", job)
    plan = await logs.plan_read(target, (LogStream.STDOUT, LogStream.STDERR), None)
    asked = 0

    async def reader_left() -> bool:
        nonlocal asked
        asked += 1
        return asked >= 3

    def banner(_replica: str, _attempt: int) -> bytes:
        return b""

    chunks = [chunk async for chunk in logs.follow(plan, reader_left, banner)]
    assert chunks == []
    assert asked >= 3  # it ended as soon as it was told, though the job is still queued

"""Log chunks in real PostgreSQL, served over HTTP: stored once, paged by cursor across
chunks and hosts, filtered, checked against a brute-force filter of the same lines, retained
and purged."""

import random
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.logs import handlers
from mldiag_run_registry.logs import service as logs_service
from mldiag_run_registry.logs.repository import LogsRepository
from mldiag_run_registry.logs.retention import LogRetention
from mldiag_run_registry.logs.service import LogsService
from mldiag_run_registry.runs.errors import RunNotFound
from mldiag_schemas.logs import SEVERITY_ORDER, LogLine, LogLinesReceived, LogSeverity, LogStream
from mldiag_schemas.runs import Run
from support import router_client

pytestmark = pytest.mark.connected

T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)
LOGS = "/v1/machineLearningRuns/{}/logs"


class KnownRuns:
    """The registry's run lookup, reduced to ids and end times (runs are tested apart)."""

    def __init__(self, *run_ids: str) -> None:
        self.ends: dict[str, datetime | None] = dict.fromkeys(run_ids)

    async def get_run(self, project: str, location: str, run_id: str) -> Run:
        if run_id not in self.ends or (project, location) != ("default", "local"):
            raise RunNotFound(f"run {run_id} not found")
        # the logs room reads only the end time
        return Run.model_construct(run_id=run_id, end_time=self.ends[run_id])


@dataclass
class Store:
    pool: asyncpg.Pool
    service: LogsService
    api: httpx.AsyncClient
    runs: KnownRuns


@pytest.fixture
async def store(database_settings: DatabaseSettings, db_schema: str) -> AsyncIterator[Store]:
    pool = await create_pool(database_settings, db_schema)
    migrations = load_migrations("run-registry-logs", "mldiag_run_registry.logs.migrations")
    await apply_migrations(pool, db_schema, migrations)
    runs = KnownRuns("run-a", "run-b")
    service = LogsService(LogsRepository(pool), runs)
    async with router_client(handlers.router, logs=service) as client:
        yield Store(pool, service, client, runs)
    await pool.execute(f"DROP SCHEMA {db_schema} CASCADE")
    await pool.close()


def line(seconds: float, text: str, **fields: Any) -> LogLine:
    return LogLine(time=T0 + timedelta(seconds=seconds), text=text, **fields)


def batch(run_id: str, lines: list[LogLine], batch_id: uuid.UUID | None = None) -> LogLinesReceived:
    return LogLinesReceived(run_id=run_id, event_id=batch_id or uuid.uuid4(), lines=lines)


async def read_all(
    api: httpx.AsyncClient, run_id: str, page_size: int = 1000, **params: str
) -> list[dict[str, Any]]:
    """Every page until the cursor stops moving."""
    entries: list[dict[str, Any]] = []
    token = ""
    while True:
        query = {**params, "pageSize": str(page_size), "pageToken": token}
        response = await api.get(LOGS.format(run_id), params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        entries += body.get("entries", [])
        if not body.get("nextPageToken") or body["nextPageToken"] == token:
            return entries
        token = body["nextPageToken"]


async def test_a_redelivered_batch_is_stored_once(store: Store) -> None:
    lines = [line(i, f"step {i}", host="h0") for i in range(5)]
    lines += [line(i, f"warn {i}", host="h1", stream=LogStream.STDERR) for i in range(3)]
    message = batch("run-a", lines)
    assert await store.service.store([message]) == 2  # one chunk per (host, stream)
    assert await store.service.store([message, message]) == 0
    texts = [e["text"] for e in await read_all(store.api, "run-a")]
    assert sorted(texts) == sorted(line.text for line in lines)
    assert await store.pool.fetchval("SELECT sum(line_count) FROM log_chunks") == 8


async def test_pids_and_process_indexes_up_to_int64_are_served_exactly(store: Store) -> None:
    # Ingestion accepts both up to 2**63 - 1; the chunk body keeps them as JSON numbers,
    # so no column type caps them below that.
    largest = 2**63 - 1
    lines = [
        line(0, "big", pid=largest, process_index=largest),
        line(1, "none"),
        line(2, "0", pid=0),
    ]
    await store.service.store([batch("run-a", lines)])
    entries = await read_all(store.api, "run-a")
    served = [(e["text"], e.get("pid"), e.get("processIndex")) for e in entries]
    assert served == [("big", largest, largest), ("none", None, None), ("0", 0, None)]


async def test_pages_follow_time_across_hosts_and_chunks(store: Store) -> None:
    # two hosts writing at once, each batch one chunk, batches interleaved in time
    for start in range(0, 40, 10):
        for host, offset in (("h0", 0.0), ("h1", 0.5)):
            lines = [line(s + offset, f"{host} {s}", host=host) for s in range(start, start + 10)]
            await store.service.store([batch("run-a", lines)])
    entries = await read_all(store.api, "run-a", page_size=7)
    times = [datetime.fromisoformat(e["time"]) for e in entries]
    assert len(entries) == 80
    assert times == sorted(times)
    assert [e["text"] for e in entries[:4]] == ["h0 0", "h1 0", "h0 1", "h1 1"]


async def test_filters_narrow_the_lines(store: Store) -> None:
    lines = [
        line(0, "loading data", host="h0", severity=LogSeverity.INFO),
        line(1, "Traceback (most recent call last):", host="h0", stream=LogStream.STDERR),
        line(2, "RuntimeError: boom", host="h1", stream=LogStream.STDERR),
        line(3, "CUDA out of memory", host="h1", severity=LogSeverity.ERROR),
        line(4, "exited with status 1", host="h1", stream=LogStream.SYSTEM),
    ]
    await store.service.store([batch("run-a", lines)])

    async def texts(**params: str) -> list[str]:
        return [e["text"] for e in await read_all(store.api, "run-a", **params)]

    assert await texts(grep="boom|memory") == ["RuntimeError: boom", "CUDA out of memory"]
    assert await texts(host="h0") == ["loading data", "Traceback (most recent call last):"]
    assert await texts(stream="stderr") == [lines[1].text, lines[2].text]
    assert await texts(minSeverity="warning") == ["CUDA out of memory"]
    since, until = (T0 + timedelta(seconds=1)).isoformat(), (T0 + timedelta(seconds=3)).isoformat()
    assert await texts(since=since, until=until) == [line.text for line in lines[1:4]]
    assert await texts(since="10m") == []  # T0 is long before now


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"grep": "(unclosed"}, "invalid_grep"),
        ({"grep": "x" * 1001}, "invalid_grep"),
        ({"since": "yesterday"}, "invalid_log_time"),
        ({"since": "2026-05-02T00:00:00Z", "until": "2026-05-01T00:00:00Z"}, "invalid_log_time"),
        ({"since": "999999999d"}, "invalid_log_time"),
        ({"until": "0001-01-01T00:00:00+14:00"}, "invalid_log_time"),
        ({"host": "h\x00"}, "invalid_argument"),  # the platform refuses NUL in any query
        ({"stream": "stdin"}, "invalid_log_stream"),
        ({"minSeverity": "LOUD"}, "invalid_log_severity"),
        ({"pageToken": "not-a-token"}, "invalid_page_token"),
        ({"pageSize": "-1"}, "invalid_page_size"),
    ],
)
async def test_bad_queries_are_refused_with_their_code(
    store: Store, params: dict[str, str], code: str
) -> None:
    response = await store.api.get(LOGS.format("run-a"), params=params)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == code


async def test_an_unknown_run_is_404(store: Store) -> None:
    response = await store.api.get(LOGS.format("run-z"))
    assert response.status_code == 404
    full = "/v1/projects/default/locations/local/machineLearningRuns/run-a/logs"
    assert (await store.api.get(full)).status_code == 200


async def test_the_cursor_stays_set_until_the_run_has_ended_a_while(store: Store) -> None:
    await store.service.store([batch("run-a", [line(0, "first")])])
    first = (await store.api.get(LOGS.format("run-a"))).json()
    assert [e["text"] for e in first["entries"]] == ["first"]
    token = first["nextPageToken"]
    again = (await store.api.get(LOGS.format("run-a"), params={"pageToken": token})).json()
    assert again.get("entries", []) == [] and again["nextPageToken"] == token

    await store.service.store([batch("run-a", [line(1, "second")])])  # a follower sees it
    more = (await store.api.get(LOGS.format("run-a"), params={"pageToken": token})).json()
    assert [e["text"] for e in more["entries"]] == ["second"]

    store.runs.ends["run-a"] = datetime.now(UTC)  # just ended: lines may still come
    assert (await store.api.get(LOGS.format("run-a"))).json()["nextPageToken"]
    store.runs.ends["run-a"] = datetime.now(UTC) - timedelta(minutes=5)
    assert not (await store.api.get(LOGS.format("run-a"))).json().get("nextPageToken")


async def test_a_follower_gets_lines_stored_late_once(store: Store) -> None:
    await store.service.store([batch("run-a", [line(i, f"h0 {i}", host="h0") for i in range(10)])])
    first = (await store.api.get(LOGS.format("run-a"))).json()
    assert len(first["entries"]) == 10
    # h1's clock runs behind: its batch lands after the follower read past 9 s
    late = [line(5.5, "h1 5.5", host="h1"), line(20, "h1 20", host="h1")]
    await store.service.store([batch("run-a", late)])
    params = {"pageToken": first["nextPageToken"]}
    second = (await store.api.get(LOGS.format("run-a"), params=params)).json()
    assert [e["text"] for e in second["entries"]] == ["h1 5.5", "h1 20"]
    params = {"pageToken": second["nextPageToken"]}
    third = (await store.api.get(LOGS.format("run-a"), params=params)).json()
    assert third.get("entries", []) == []
    # a reader from the start sees every line once, in time order
    texts = [e["text"] for e in await read_all(store.api, "run-a", page_size=4)]
    h0 = [f"h0 {i}" for i in range(10)]
    assert texts == [*h0[:6], "h1 5.5", *h0[6:], "h1 20"]


async def test_retention_deletes_only_chunks_older_than_the_period(store: Store) -> None:
    now = datetime.now(UTC)
    old = [LogLine(time=now - timedelta(days=40, seconds=i), text=f"old {i}") for i in range(3)]
    # a chunk that straddles the cutoff stays whole: its last line is recent
    straddling = [
        LogLine(time=now - timedelta(days=31), text="early", host="h1"),
        LogLine(time=now - timedelta(days=29), text="late", host="h1"),
    ]
    recent = [LogLine(time=now - timedelta(days=1), text="new", host="h2")]
    await store.service.store([batch("run-a", old + straddling + recent)])
    retention = LogRetention(LogsRepository(store.pool), days=30)
    assert await retention.sweep(now) == 1
    texts = [e["text"] for e in await read_all(store.api, "run-a")]
    assert texts == ["early", "late", "new"]
    assert await LogRetention(LogsRepository(store.pool), days=0).sweep(now) == 0


async def test_purging_a_run_deletes_its_chunks_only(store: Store) -> None:
    for run_id in ("run-a", "run-b"):
        for i in range(3):
            await store.service.store([batch(run_id, [line(i, f"{run_id} {i}")])])
    retention = LogRetention(LogsRepository(store.pool), days=30)
    assert await retention.purge_run("run-a") == 3
    assert await read_all(store.api, "run-a") == []
    assert len(await read_all(store.api, "run-b")) == 3


def _random_lines(rng: random.Random, count: int) -> list[LogLine]:
    words = ["step", "loss", "boom", "nccl", "timeout", "ok", "WARN", "Error", "ééé", "[x]"]
    return [
        LogLine(
            # coarse times: many ties, across hosts and within a chunk
            time=T0 + timedelta(seconds=rng.randrange(0, 300) / 4),
            host=rng.choice(["h0", "h1", "h2"]),
            stream=rng.choice(list(LogStream)),
            severity=rng.choice(list(LogSeverity)),
            text=" ".join(rng.choices(words, k=rng.randrange(1, 5))),
            pid=rng.choice([None, 7, 8]),
            process_index=rng.choice([None, 0, 1]),
        )
        for _ in range(count)
    ]


async def test_every_query_answers_what_a_brute_force_filter_of_the_lines_does(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # few chunks per walk and a small scan budget: pages end at walk boundaries and early
    monkeypatch.setattr(logs_service, "WALK_CHUNKS", 3)
    monkeypatch.setattr(logs_service, "SCAN_BUDGET_LINES", 40)
    rng = random.Random(17)
    stored: list[LogLine] = []
    for _ in range(18):
        lines = _random_lines(rng, rng.randrange(1, 24))
        stored += lines
        await store.service.store([batch("run-a", lines)])

    queries: list[dict[str, str]] = [
        {},
        {"grep": "boom|nccl"},
        {"grep": "^step"},
        {"host": "h1"},
        {"stream": "stderr", "minSeverity": "WARNING"},
        {"since": (T0 + timedelta(seconds=20)).isoformat()},
        {"until": (T0 + timedelta(seconds=30)).isoformat(), "host": "h2"},
        {"grep": "é", "since": (T0 + timedelta(seconds=10)).isoformat(), "minSeverity": "INFO"},
    ]
    for params in queries:
        for size in (4, 1000):
            got = await read_all(store.api, "run-a", page_size=size, **params)
            want = [li for li in stored if _wanted(li, params)]
            got_keys = [
                (datetime.fromisoformat(e["time"]), e.get("host", ""), e["stream"], e["text"])
                for e in got
            ]
            assert [g[0] for g in got_keys] == sorted(g[0] for g in got_keys), params
            assert sorted(got_keys) == sorted(
                (li.time, li.host, li.stream.value, li.text) for li in want
            ), (params, size)


def _wanted(li: LogLine, params: dict[str, str]) -> bool:
    if "grep" in params and not re.search(params["grep"], li.text):
        return False
    if "host" in params and li.host != params["host"]:
        return False
    if "stream" in params and li.stream.value != params["stream"].upper():
        return False
    if (
        "minSeverity" in params
        and SEVERITY_ORDER[li.severity] < SEVERITY_ORDER[LogSeverity(params["minSeverity"])]
    ):
        return False
    if "since" in params and li.time < datetime.fromisoformat(params["since"]):
        return False
    return not ("until" in params and li.time > datetime.fromisoformat(params["until"]))


async def test_a_follower_reading_between_random_batches_gets_every_line_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_service, "WALK_CHUNKS", 3)
    rng = random.Random(29)
    stored: list[LogLine] = []
    got: list[tuple[datetime, str, str, str]] = []
    token = ""
    for _ in range(15):
        lines = _random_lines(rng, rng.randrange(1, 12))  # times anywhere in the window
        stored += lines
        await store.service.store([batch("run-a", lines)])
        while True:
            params = {"pageSize": "5", "pageToken": token, "grep": "."}
            body = (await store.api.get(LOGS.format("run-a"), params=params)).json()
            entries = body.get("entries", [])
            times = [datetime.fromisoformat(e["time"]) for e in entries]
            assert times == sorted(times)
            got += [
                (t, e.get("host", ""), e["stream"], e["text"])
                for t, e in zip(times, entries, strict=True)
            ]
            caught_up = not entries and body["nextPageToken"] == token
            token = body["nextPageToken"]
            if caught_up:
                break
    assert sorted(got) == sorted((li.time, li.host, li.stream.value, li.text) for li in stored)

"""The platform as real processes under sustained load, faults injected into it, and the
books kept on what came out: what the chaos tests assert and ``benchmarks/chaos.py`` prints.

Every service runs as ``python -m <module>`` (as ``mldiag up`` runs it), ``replicas`` times,
against a NATS URL (a :class:`~mldiag.local.nats_cluster.NatsCluster` here) and a PostgreSQL
database. A :class:`Load` writes points through ingestion the way the SDK does: each request
carries a ``batchId`` and is retried with it until ingestion answers 202, so a point counts
as sent exactly when the platform has promised to store it. The books are read from the
registry's tables: every sent point must be stored once, and every run's one NaN must open
one NUMERICAL_INSTABILITY event.
"""

import asyncio
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats

from mldiag.local.config import SERVICES, ServiceSpec
from mldiag.local.nats_cluster import NatsCluster
from mldiag.local.postgres import EmbeddedPostgres
from mldiag_schemas.bus import TELEMETRY, Namespace
from run_registry.helpers import stored_points

REGISTRY_SCHEMA = "run_registry"
NAN_EVENT = '%"kind":"non_finite"%'
"""How the body of an event the NaN rule opened reads (its evidence's kind)."""
RETRY_FOR_SECONDS = 180
"""How long a writer retries one request, as the SDK keeps a batch through an outage."""
ACK_WAIT_SECONDS = 10
"""How long a killed consumer's batch stays unacked before another replica gets it."""


@dataclass
class Replica:
    """One process of one service, on its own HTTP port."""

    spec: ServiceSpec
    index: int
    port: int
    env: dict[str, str]
    log: Path
    process: "subprocess.Popen[bytes] | None" = None

    @property
    def url(self) -> str:
        """Base URL of its HTTP server."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the process, its output appended to its log."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.spec.module],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def tail(self, lines: int = 30) -> str:
        """The end of its log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: no shutdown, no acks, no flush."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()


_NOT_RUN = frozenset({"edge", "training", "executor", "notifier"})
"""Not in these scenarios: the edge (clients here call the services' replicas directly, as a
load balancer would), training with its executor (no jobs are run) and the notifier (no
channels: its redeliveries and replicas are tested in tests/notifier)."""


@dataclass
class Platform:
    """Every service, ``replicas`` processes each, in ``home`` (logs, storage, XProf dirs)."""

    home: Path
    nats_url: str
    database_url: str
    ports: Callable[[], int]
    replicas: int = 1
    stream_replicas: int = 1
    namespace: str = field(default_factory=lambda: f"chaos{uuid.uuid4().hex[:8]}")
    token: str = field(default_factory=lambda: "mldiag_" + secrets.token_urlsafe(32))
    services: dict[str, list[Replica]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        for spec in SERVICES:
            if spec.name in _NOT_RUN:
                continue
            self.services[spec.name] = [
                self._replica(spec, index) for index in range(self.replicas)
            ]
        # Sessions' links point at the first provisioner, as a load balancer would.
        xprof = self.services["xprof-provisioner"][0].url
        for replica in self.replicas_of("run-registry"):
            replica.env["MLDIAG_RUN_REGISTRY_XPROF_URL"] = xprof

    def _replica(self, spec: ServiceSpec, index: int) -> Replica:
        port = self.ports()
        env = {
            "MLDIAG_NATS_URL": self.nats_url,
            "MLDIAG_NATS_NAMESPACE": self.namespace,
            "MLDIAG_NATS_STREAM_REPLICAS": str(self.stream_replicas),
            "MLDIAG_NATS_ACK_WAIT_SECONDS": str(ACK_WAIT_SECONDS),
            "MLDIAG_DATABASE_URL": self.database_url,
            # Ten processes share one server: keep well under its 100 connections.
            "MLDIAG_DATABASE_POOL_MAX_SIZE": "4",
            "MLDIAG_STORAGE_URL": f"file://{self.home / 'storage'}",
            "MLDIAG_LOG_LEVEL": "WARNING",
            "MLDIAG_LOG_FORMAT": "json",
            "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": self.token,
            "MLDIAG_INGESTION_OTLP_ENABLED": "false",
            "MLDIAG_XPROF_PROVISIONER_WORK_DIR": str(self.home / f"xprof-{index}"),
            # No instance is opened here; each replica still needs a range of its own.
            "MLDIAG_XPROF_PROVISIONER_FIRST_INSTANCE_PORT": str(29100 + 16 * index),
            "MLDIAG_XPROF_PROVISIONER_INSTANCE_PORT_COUNT": "8",
            f"{spec.env_prefix}_PORT": str(port),
            "PYTHONUNBUFFERED": "1",
        }
        return Replica(spec, index, port, env, self.home / "logs" / f"{spec.name}-{index}.log")

    def replicas_of(self, service: str) -> list[Replica]:
        """The processes of ``service``."""
        return self.services[service]

    @property
    def api(self) -> str:
        """The registry's API (its first replica)."""
        return self.replicas_of("run-registry")[0].url

    @property
    def ingestion(self) -> list[str]:
        """Every ingestion replica's base URL (a load balancer's backends)."""
        return [replica.url for replica in self.replicas_of("ingestion")]

    @property
    def headers(self) -> dict[str, str]:
        """The admin token, as a header."""
        return {"Authorization": f"Bearer {self.token}"}

    async def start(self, timeout: float = 120.0) -> None:
        """Start every process; return once all answer healthy.

        One registry goes first, alone: it creates the streams and the token directory the
        others read. On a loaded cluster creating R3 streams can outlast a JetStream API
        call's 5 s, and every process that starts at once would race to create them.
        """
        first, *others = [replica for replicas in self.services.values() for replica in replicas]
        first.start()
        await self._wait_replica(first, timeout)
        for replica in others:
            replica.start()
        for replica in others:
            await self._wait_replica(replica, timeout)

    async def wait_healthy(self, service: str, timeout: float = 60.0) -> None:
        """Return once every replica of ``service`` answers ``/healthz`` with 200."""
        for replica in self.replicas_of(service):
            await self._wait_replica(replica, timeout)

    async def _wait_replica(self, replica: Replica, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        name = f"{replica.spec.name}-{replica.index}"
        async with httpx.AsyncClient(timeout=1.0) as client:
            while not await _answers_ok(client, f"{replica.url}/healthz"):
                process = replica.process
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"{name} exited:\n{replica.tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} not healthy in {timeout}s:\n{replica.tail()}")
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """Stop every process."""
        for replicas in self.services.values():
            for replica in replicas:
                replica.stop()

    async def create_runs(self, run_ids: list[str]) -> None:
        """Create the runs through the API."""
        async with httpx.AsyncClient(base_url=self.api, headers=self.headers, timeout=30) as api:
            for run_id in run_ids:
                response = await api.post(
                    "/v1/machineLearningRuns", json={"runId": run_id, "displayName": run_id}
                )
                response.raise_for_status()


async def _answers_ok(client: httpx.AsyncClient, url: str) -> bool:
    try:
        return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


class Load:
    """Writers, one per run, each posting ``points`` loss values per request through
    ingestion (round robin over its replicas, next one on a failure), ``pause`` seconds
    apart, until :meth:`stop`. Steps of a run are consecutive: a request's steps are taken
    only once the one before was accepted, so ``accepted[run]`` is also its next step.
    :meth:`poison` makes every writer put one NaN in its next request.
    """

    def __init__(
        self, platform: Platform, run_ids: list[str], points: int = 100, pause: float = 0.1
    ) -> None:
        self.platform = platform
        self.run_ids = run_ids
        self.points = points
        self.pause = pause
        self.accepted = dict.fromkeys(run_ids, 0)
        self.failures = 0
        self._poisoned: set[str] = set()
        self._poison_pending = False
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def sent(self) -> int:
        """Points ingestion accepted (answered 202 for)."""
        return sum(self.accepted.values())

    def start(self) -> None:
        """Start the writers."""
        self._tasks = [
            asyncio.create_task(self._writer(run_id, offset))
            for offset, run_id in enumerate(self.run_ids)
        ]

    def poison(self) -> None:
        """Every run's next request carries one NaN (once per run)."""
        self._poison_pending = True

    async def stop(self) -> None:
        """Stop after the requests in flight are accepted (or given up on)."""
        self._stopping.set()
        await asyncio.gather(*self._tasks)

    async def _writer(self, run_id: str, offset: int) -> None:
        urls = self.platform.ingestion
        turn = offset
        async with httpx.AsyncClient(headers=self.platform.headers, timeout=10) as client:
            while not self._stopping.is_set():
                body = self._next_body(run_id)
                deadline = time.monotonic() + RETRY_FOR_SECONDS
                while True:
                    url = urls[turn % len(urls)]
                    turn += 1
                    if await self._post(client, url, run_id, body):
                        break
                    self.failures += 1
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{run_id}: no 202 in {RETRY_FOR_SECONDS} s; last {url}")
                    await asyncio.sleep(0.2)
                self.accepted[run_id] += self.points
                await asyncio.sleep(self.pause)

    def _next_body(self, run_id: str) -> dict[str, Any]:
        start = self.accepted[run_id]
        steps = list(range(start, start + self.points))
        # A smooth, falling loss: the only event it can open is the NaN's.
        values = [1.0 / (1.0 + 0.001 * step) for step in steps]
        if self._poison_pending and run_id not in self._poisoned:
            self._poisoned.add(run_id)
            values[len(values) // 2] = math.nan
        series = {"name": "loss", "host": "h0", "steps": steps, "values": values}
        return {"batchId": str(uuid.uuid4()), "series": [series]}

    @property
    def poisoned(self) -> set[str]:
        """Runs whose NaN has been written (or is being written)."""
        return set(self._poisoned)

    async def _post(
        self, client: httpx.AsyncClient, url: str, run_id: str, body: dict[str, Any]
    ) -> bool:
        try:
            response = await client.post(
                f"{url}/v1/machineLearningRuns/{run_id}/metrics:write",
                # json.dumps writes NaN as the token the API accepts
                content=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError:
            return False
        if response.status_code == 202:
            return True
        if response.status_code < 500 and response.status_code != 429:
            raise RuntimeError(f"{run_id}: {response.status_code} {response.text}")
        return False


@dataclass(frozen=True)
class Books:
    """What the registry holds for some runs."""

    rows: int
    """Point rows stored."""
    distinct: int
    """Distinct (series, step) among them."""
    events: dict[str, int]
    """Events of the NaN rule per run (runs without any are absent)."""
    spurious: int
    """Any other event on these runs (the load is smooth: none should open)."""
    analysed: int
    """Those events with an analysis."""
    analyses_doubled: int
    """Analyses beyond one per event."""


async def read_books(database_url: str, run_ids: list[str]) -> Books:
    """Count what the registry stored for ``run_ids``."""
    # points live in compressed chunks: counted through the registry's own repository
    pool = await asyncpg.create_pool(
        database_url, min_size=1, max_size=2, server_settings={"search_path": REGISTRY_SCHEMA}
    )
    try:
        rows, distinct = await stored_points(pool, REGISTRY_SCHEMA, run_ids)
    finally:
        await pool.close()
    conn = await asyncpg.connect(database_url, timeout=5)
    try:
        # The body is JSON text (its evidence may hold NaN, which jsonb refuses).
        events = await conn.fetch(
            f"SELECT run_id, count(*) FILTER (WHERE body LIKE $2) AS nan,"
            " count(*) FILTER (WHERE body NOT LIKE $2) AS other"
            f" FROM {REGISTRY_SCHEMA}.events WHERE run_id = ANY($1) GROUP BY run_id",
            run_ids,
            NAN_EVENT,
        )
        analyses = await conn.fetchrow(
            "SELECT count(DISTINCT a.event_id) AS analysed,"
            " count(*) - count(DISTINCT a.event_id) AS doubled"
            f" FROM {REGISTRY_SCHEMA}.analyses a JOIN {REGISTRY_SCHEMA}.events e USING (event_id)"
            " WHERE e.run_id = ANY($1) AND e.body LIKE $2",
            run_ids,
            NAN_EVENT,
        )
    finally:
        await conn.close()
    return Books(
        rows=rows,
        distinct=distinct,
        events={row["run_id"]: row["nan"] for row in events if row["nan"]},
        spurious=sum(row["other"] for row in events),
        analysed=analyses["analysed"],
        analyses_doubled=analyses["doubled"],
    )


async def _max_steps(database_url: str, run_ids: list[str]) -> dict[str, int]:
    try:
        conn = await asyncpg.connect(database_url, timeout=2)
        try:
            rows = await conn.fetch(
                f"SELECT run_id, last_step FROM {REGISTRY_SCHEMA}.metric_series"
                " WHERE run_id = ANY($1)",
                run_ids,
            )
        finally:
            await conn.close()
    except Exception:  # noqa: BLE001  # whatever the error, the database is not back yet
        return {}
    return {row["run_id"]: row["last_step"] for row in rows}


@dataclass(frozen=True)
class Outcome:
    """One fault's row of the chaos table."""

    fault: str
    sent: int
    stored: int
    duplicated: int
    events_expected: int
    events_opened: int
    events_doubled: int
    spurious_events: int
    analysed: int
    analyses_doubled: int
    write_recovered_s: float
    """From the fault until a point sent after it is stored."""
    healthy_s: float
    """From the fault until the faulty part is back and healthy."""
    ingest_failures: int
    """Requests that got no 202 and were retried."""

    @property
    def clean(self) -> bool:
        """Nothing lost, doubled or missed."""
        return (
            self.stored == self.sent
            and self.duplicated == 0
            and self.events_opened == self.events_expected
            and self.events_doubled == 0
            and self.spurious_events == 0
            and self.analysed == self.events_expected
            and self.analyses_doubled == 0
        )


Fault = Callable[[], Awaitable[None]]
"""Injects a fault and returns once the faulty part is back and healthy."""


async def under_load(
    platform: Platform,
    name: str,
    fault: Fault,
    runs: int = 4,
    warmup: float = 2.0,
    after: float = 3.0,
    settle_timeout: float = 90.0,
) -> Outcome:
    """Write to ``runs`` fresh runs, inject ``fault`` once the load is steady (and a NaN in
    every run at the same moment), keep writing ``after`` seconds past recovery, then wait
    for the books to balance (or ``settle_timeout``) and read them."""
    # Run ids are resource ids: lowercase letters, digits and dashes.
    slug = "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())
    run_ids = [f"{slug}-{index}-{uuid.uuid4().hex[:6]}" for index in range(runs)]
    await platform.create_runs(run_ids)
    load = Load(platform, run_ids)
    load.start()
    await asyncio.sleep(warmup)
    began = time.monotonic()
    # The request in flight now was sent before the fault; the next one starts at its mark.
    marks = {run: accepted + load.points for run, accepted in load.accepted.items()}
    load.poison()
    written = asyncio.create_task(_first_new_point(platform.database_url, marks))
    await fault()
    healthy_s = time.monotonic() - began
    write_recovered_s = (await asyncio.wait_for(written, settle_timeout)) - began
    await asyncio.sleep(after)
    await load.stop()
    books = await _settled(platform.database_url, load, settle_timeout)
    return Outcome(
        fault=name,
        sent=load.sent,
        stored=books.distinct,
        duplicated=books.rows - books.distinct,
        events_expected=len(load.poisoned),
        events_opened=len(books.events),
        events_doubled=sum(count - 1 for count in books.events.values()),
        spurious_events=books.spurious,
        analysed=books.analysed,
        analyses_doubled=books.analyses_doubled,
        write_recovered_s=write_recovered_s,
        healthy_s=healthy_s,
        ingest_failures=load.failures,
    )


async def _first_new_point(database_url: str, marks: dict[str, int]) -> float:
    while True:
        stored = await _max_steps(database_url, list(marks))
        if any(stored.get(run, -1) >= mark for run, mark in marks.items()):
            return time.monotonic()
        await asyncio.sleep(0.05)


async def _settled(database_url: str, load: Load, timeout: float) -> Books:
    """The books once every sent point and every NaN's event and analysis are in (or as
    they are after ``timeout``); a little longer, so that late doubles show too."""
    deadline = time.monotonic() + timeout
    expected = len(load.poisoned)
    while True:
        books = await read_books(database_url, load.run_ids)
        done = (
            books.distinct >= load.sent
            and len(books.events) >= expected
            and books.analysed >= expected
        )
        if done or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    await asyncio.sleep(1.0)
    return await read_books(database_url, load.run_ids)


def kill_service(
    platform: Platform, service: str, count: int | None = None, down: float = 1.0
) -> Fault:
    """SIGKILL ``count`` replicas of ``service`` at once (all of them by default: the
    service is gone); start them again ``down`` seconds later."""
    victims = platform.replicas_of(service)[:count]

    async def fault() -> None:
        for replica in victims:
            replica.kill()
        await asyncio.sleep(down)
        for replica in victims:
            replica.start()
        await platform.wait_healthy(service)

    return fault


def kill_nats_node(platform: Platform, cluster: NatsCluster, down: float = 3.0) -> Fault:
    """SIGKILL the node leading the telemetry stream (the one every write goes through);
    start it again ``down`` seconds later and wait until it has caught up."""

    async def fault() -> None:
        client = await nats.connect(cluster.urls)
        try:
            stream = Namespace(platform.namespace).stream(TELEMETRY)
            info = await client.jetstream().stream_info(stream)
        finally:
            await client.close()
        leader = info.cluster.leader if info.cluster else None
        index = next((i for i, node in enumerate(cluster.nodes) if node.name == leader), 0)
        cluster.kill(index)
        await asyncio.sleep(down)
        await asyncio.to_thread(cluster.restart, index)

    return fault


def nats_outage(cluster: NatsCluster, seconds: float) -> Fault:
    """SIGKILL every NATS node: no bus at all for ``seconds``; then start them again."""

    async def fault() -> None:
        for index in range(len(cluster.nodes)):
            cluster.kill(index)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(cluster.start)

    return fault


def restart_postgres(platform: Platform, postgres: EmbeddedPostgres, down: float = 2.0) -> Fault:
    """Stop PostgreSQL (a fast shutdown: every connection is cut), start it ``down`` seconds
    later, and wait until the services that use it answer healthy again."""

    async def fault() -> None:
        await asyncio.to_thread(postgres.stop)
        await asyncio.sleep(down)
        await asyncio.to_thread(postgres.start)
        for service in ("run-registry", "event-detector"):
            await platform.wait_healthy(service)

    return fault

"""How the cost of metrics grows with the store: ingest, reads and disk at 0, 10M and 100M points.

Run: ``.venv/bin/python benchmarks/metrics_scale.py [--sizes 0,10000000,100000000]
[--slice 1600000] [--clients 2] [--runs 1000] [--big-share 0.8] [--fill-tasks 3]
[--ingest-repeat 3] [--keep]`` (quick look: ``--sizes 0,1000000,5000000 --slice 400000
--runs 200``; ``--keep`` leaves the database behind to EXPLAIN the reads).

Stack: ingestion and run-registry as real processes against the machine's NATS
(``MLDIAG_BENCH_NATS_URL``, a fresh namespace) and PostgreSQL (``MLDIAG_BENCH_DATABASE_URL``,
a fresh database), as ``metrics_e2e.py`` does. Before anything is stored, ``--runs`` runs
(labels ``team`` and ``tier``, phases ACTIVE/COMPLETED/FAILED), one big run and one run with
100 metrics are created through ``POST /v1/machineLearningRuns``.

At each size S (points filled in bulk; the ingest slices come on top, so the store holds
S plus the slices, as the ledger ``metric_messages`` counts and the table prints):

1. fill: the store grows by what S adds straight through the registry's repository
   (``MetricsRepository.store_messages``, ledger, points and rollups as the bus consumer
   stores them), from ``--fill-tasks`` asyncio tasks, in batches of 40 messages of at most
   ``MAX_POINTS_PER_MESSAGE`` points (the size ingestion publishes). The big run's ``loss``
   grows to ``--big-share`` x S points (80M at 100M); the many runs' 10 metrics each share
   the rest (20M at 100M: 2000 steps a series). Points are realistic and built with numpy:
   consecutive steps, times 10 ms apart with jitter, a noisy decaying loss. Then
   ``VACUUM (ANALYZE)`` of the metric tables, what autovacuum does to a freshly loaded table
   within minutes, so reads use steady plans.
2. reads over HTTP, median of 31 after 3 warm-ups: the big run's ``loss`` in 1000 buckets
   (and ``withTimes=true``, as the console asks), a zoom on 1% of its steps in 1000
   buckets, ``metrics:latest`` of the 100-metric run, and a run list
   (``filter=labels.team="nlp" AND state="STATE_COMPLETED"``, ``orderBy=createTime desc``,
   ``pageSize=50``).
3. ingest: ``--slice`` points (10 metrics, 1000 steps per request, columnar frames as the
   SDK sends them, or JSON with ``--encoding json``) written end to end by
   ``--clients`` client processes through ingestion's ``metrics:write`` into a run of their
   own, counted when committed (the ledger), ``--ingest-repeat`` times; the median counts (on
   a shared machine two tries of one size differ by up to 2x) and the empty store's is the
   reference. A 200k-point write before the first size warms the processes. Beside the rate,
   the CPU µs a point of ingestion, run-registry and the database's PostgreSQL backends
   (from /proc): the cost itself, which other processes' load on the machine leaves alone.
4. disk: ``pg_total_relation_size`` (table, TOAST and indexes) of every table of the
   registry's schema whose name starts with ``metric_``, all partitions included, divided by
   the points stored; per table too.

The free disk is checked before each fill (64 bytes a point assumed at first, then what the
previous size measured), and a size that would not fit is refused with a message.

Expected run time on 2 CPUs (measured with the chunk store of cf07459 and after): the
defaults about 5 minutes on a quiet machine and 10 on a busy one (the 100M fill dominates:
90M points at 1M points/s quiet, 350k busy; the 1000 runs created over HTTP 5-20 s);
``--sizes 0,10000000`` 1.5 to 3. Disk:
1.5 GB in the database at 100M (14 bytes a point). The script stops its services
and drops its database and streams on exit, Ctrl-C and SIGTERM included.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np
import numpy.typing as npt
import structlog
from _support import (
    committed_points,
    cpu_seconds,
    create_database,
    create_run,
    drop_database,
    drop_streams,
    emit,
    free_disk_bytes,
    free_port,
    machine_summary,
    median_get_ms,
    process,
    relation_sizes,
    start_clients,
    wait_http,
)

from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_schemas.columnar import CONTENT_TYPE, encode_frame
from mldiag_schemas.ids import DEFAULT_PROJECT
from mldiag_schemas.telemetry import (
    MAX_POINTS_PER_MESSAGE,
    MetricColumns,
    MetricPointsReceived,
)

PYTHON = sys.executable
NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SCHEMA = "bench_registry"
METRICS = 10
"""Metrics of each of the many runs (and of each ingest request)."""
LATEST_METRICS = 100
STEPS_PER_REQUEST = 1000
MESSAGES_PER_BATCH = 40
REPEAT = 31
BASE_US = 1_767_225_600_000_000
"""2026-01-01T00:00:00Z in µs: where every series' step 0 lies."""
STEP_US = 10_000
"""A training step every 10 ms."""
ASSUMED_BYTES_PER_POINT = 64
STALL_S = 60.0
"""An ingest that commits nothing for this long has failed (the services' logs say why)."""
TEAMS = ("vision", "nlp", "speech", "rl")
PHASES = ("ACTIVE", "COMPLETED", "FAILED")
RUN_LIST_FILTER = 'labels.team = "nlp" AND state = "STATE_COMPLETED"'


def _auth() -> dict[str, str]:
    """The benchmark's admin token (set by ``main``, inherited by the client processes)."""
    return {"Authorization": f"Bearer {os.environ['MLDIAG_BENCH_TOKEN']}"}


# --- data ------------------------------------------------------------------------------


def _loss(
    rng: np.random.Generator, start: int, count: int, tau: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps, times (µs) and values of ``count`` consecutive points of a decaying loss."""
    steps = np.arange(start, start + count, dtype=np.int64)
    times = BASE_US + steps * STEP_US + rng.integers(0, STEP_US // 2, count, dtype=np.int64)
    decay = np.exp(-steps / tau)
    values = 0.05 + 2.5 * decay + rng.normal(0.0, 0.02, count) * (1.0 + 4.0 * decay)
    return steps, times, values


def _columns(
    name: str, host: str, steps: np.ndarray, times: np.ndarray, values: np.ndarray
) -> MetricColumns:
    return MetricColumns(
        name=name,
        host=host,
        steps=steps.tolist(),
        values=values.tolist(),
        times_unix_us=times.tolist(),
    )


def _message(run_id: str, series: list[MetricColumns]) -> MetricPointsReceived:
    return MetricPointsReceived(run_id=run_id, batch_id=uuid.uuid4(), chunk=0, series=series)


@dataclass
class Filled:
    """How far the bulk fill has gone."""

    big_points: int = 0
    """Points of the big run's ``loss``."""
    run_steps: int = 0
    """Steps of each series of the many runs."""


def _big_batches(
    rng: np.random.Generator, run_id: str, start: int, end: int, tau: float
) -> Iterator[list[MetricPointsReceived]]:
    """The big run's ``loss`` from step ``start`` to ``end``, one message per chunk."""
    batch: list[MetricPointsReceived] = []
    for first in range(start, end, MAX_POINTS_PER_MESSAGE):
        count = min(MAX_POINTS_PER_MESSAGE, end - first)
        batch.append(_message(run_id, [_columns("loss", "host-0", *_loss(rng, first, count, tau))]))
        if len(batch) == MESSAGES_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _run_batches(
    rng: np.random.Generator, run_ids: list[str], start: int, end: int
) -> Iterator[list[MetricPointsReceived]]:
    """Steps ``start`` to ``end`` of every metric of the many runs: one message per run and
    slice of steps that keeps a message within ``MAX_POINTS_PER_MESSAGE`` points."""
    per_message = MAX_POINTS_PER_MESSAGE // METRICS
    batch: list[MetricPointsReceived] = []
    for first in range(start, end, per_message):
        count = min(per_message, end - first)
        for run_id in run_ids:
            series = []
            for m in range(METRICS):
                steps, times, values = _loss(rng, first, count, tau=2_000.0)
                series.append(_columns(f"m{m}", "host-0", steps, times, values * (m + 1)))
            batch.append(_message(run_id, series))
            if len(batch) == MESSAGES_PER_BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


StoreCall = Callable[[list[MetricPointsReceived]], Awaitable[object]]


def _store_call(repository: MetricsRepository) -> StoreCall:
    """``store_messages`` with each run's project (every run here is in the default one)."""

    def call(messages: list[MetricPointsReceived]) -> Awaitable[object]:
        projects = {message.run_id: DEFAULT_PROJECT for message in messages}
        return repository.store_messages(messages, projects)

    return call


async def _fill(
    store: StoreCall, batches: Iterator[list[MetricPointsReceived]], tasks: int, total: int
) -> float:
    """Store every batch from ``tasks`` concurrent tasks; seconds taken. Progress every 10%."""
    started = time.perf_counter()
    done = 0
    next_report = total // 10

    async def worker() -> None:
        nonlocal done, next_report
        for batch in batches:  # a shared iterator: each batch goes to one task
            await store(batch)
            done += sum(message.point_count() for message in batch)
            if total >= 1_000_000 and done >= next_report:
                elapsed = time.perf_counter() - started
                emit(f"  fill {done:>13,} / {total:,} points, {done / elapsed:>9,.0f} points/s")
                next_report += total // 10

    await asyncio.gather(*(worker() for _ in range(tasks)))
    return time.perf_counter() - started


# --- the ingest slice over HTTP ----------------------------------------------------------


def _packed(typecode: str, column: npt.NDArray[Any]) -> "array[Any]":
    """A numpy column as the ``array`` the SDK packs (one copy, no objects per point)."""
    packed = array(typecode)
    packed.frombytes(column.astype("<i8" if typecode == "q" else "<f8").tobytes())
    return packed


def _client_bodies(client: int, steps: int, encoding: str) -> list[bytes]:
    rng = np.random.default_rng(client)
    bodies = []
    for start in range(0, steps, STEPS_PER_REQUEST):
        count = min(STEPS_PER_REQUEST, steps - start)
        if encoding == "columnar":  # as the SDK sends them: one frame of packed columns
            metas, columns = [], []
            for m in range(METRICS):
                step_arr, times, values = _loss(rng, start, count, tau=steps / 4)
                metas.append({"name": f"m{m}", "host": f"client-{client}"})
                columns.append((_packed("q", step_arr), _packed("d", values), _packed("q", times)))
            bodies.append(encode_frame({"series": metas}, columns))
            continue
        series = []
        for m in range(METRICS):
            step_arr, times, values = _loss(rng, start, count, tau=steps / 4)
            series.append(
                {
                    "name": f"m{m}",
                    "host": f"client-{client}",
                    "steps": step_arr.tolist(),
                    "values": values.tolist(),
                    "times": [
                        (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=t)).isoformat()
                        for t in times.tolist()
                    ],
                }
            )
        bodies.append(json.dumps({"series": series}).encode())
    return bodies


async def _ingest(
    ingestion: str,
    run_id: str,
    db: str,
    points: int,
    clients: int,
    pids: list[int],
    encoding: str,
) -> tuple[int, float, list[float]]:
    """Write ``points`` through ingestion; (points, seconds until committed, CPU seconds of
    the processes ``pids`` and of the database's PostgreSQL backends meanwhile)."""
    steps = points // METRICS // clients
    url = f"{ingestion}/v1/machineLearningRuns/{run_id}/metrics:write"
    content_type = CONTENT_TYPE if encoding == "columnar" else "application/json"
    builds = [partial(_client_bodies, c, steps, encoding) for c in range(clients)]
    procs, go = await start_clients(url, builds, content_type, os.environ["MLDIAG_BENCH_TOKEN"])
    conn = await asyncpg.connect(db)
    total = steps * METRICS * clients
    target = await committed_points(conn, SCHEMA) + total
    cpu = [cpu_seconds(pid) for pid in pids]
    backends = await _backend_cpu(conn)
    started = time.perf_counter()
    go.set()
    last, progressed = 0, time.perf_counter()
    while (committed := await committed_points(conn, SCHEMA)) < target:
        if not any(proc.is_alive() for proc in procs) and any(p.exitcode for p in procs):
            raise RuntimeError("an ingest client failed")
        if committed != last:
            last, progressed = committed, time.perf_counter()
        elif time.perf_counter() - progressed > STALL_S:
            for proc in procs:
                proc.kill()
            raise RuntimeError(f"nothing committed for {STALL_S:.0f} s (see the services' logs)")
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu, strict=True)]
    after = await _backend_cpu(conn)
    # a backend opened meanwhile counts from zero; one closed meanwhile is lost (pools keep
    # theirs open, so that is rare)
    cpu.append(sum(seconds - backends.get(pid, 0.0) for pid, seconds in after.items()))
    for proc in procs:
        proc.join()
    await conn.close()
    return total, elapsed, cpu


async def _backend_cpu(conn: asyncpg.Connection) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend of this database but ``conn``'s own
    (readable where the server runs on this machine and we may read its /proc)."""
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    seconds = {}
    for row in rows:
        with contextlib.suppress(OSError, ValueError, IndexError):
            seconds[row["pid"]] = cpu_seconds(row["pid"])
    return seconds


# --- reads ------------------------------------------------------------------------------


@dataclass
class Reads:
    """Medians in ms."""

    chart: float
    chart_times: float
    zoom: float
    latest: float
    latest_count: int
    run_list: float
    run_list_count: int


def _reads(api: str, big_run: str, big_points: int, latest_run: str) -> Reads:
    with httpx.Client(base_url=api, timeout=60, headers=_auth()) as http:
        series = f"/v1/machineLearningRuns/{big_run}/metrics/loss"
        # each read warmed up 3 times first (the connection, the caches)
        chart = median_get_ms(http, series, REPEAT, {"buckets": 1000}, warmup=3)
        times = {"buckets": 1000, "withTimes": "true"}
        chart_times = median_get_ms(http, series, REPEAT, times, warmup=3)
        low = big_points // 2
        window = {"buckets": 1000, "startStep": low, "endStep": low + max(big_points // 100, 1)}
        zoom = median_get_ms(http, series, REPEAT, window, warmup=3)
        latest_url = f"/v1/machineLearningRuns/{latest_run}/metrics:latest"
        latest = median_get_ms(http, latest_url, REPEAT, warmup=3)
        latest_count = len(http.get(latest_url).json()["values"])
        runs_params: dict[str, str | int] = {
            "filter": RUN_LIST_FILTER,
            "orderBy": "createTime desc",
            "pageSize": 50,
        }
        run_list = median_get_ms(http, "/v1/machineLearningRuns", REPEAT, runs_params, warmup=3)
        listed = http.get("/v1/machineLearningRuns", params=runs_params).json()
        run_list_count = len(listed.get("machineLearningRuns", listed.get("runs", [])))
    return Reads(chart, chart_times, zoom, latest, latest_count, run_list, run_list_count)


# --- set-up -----------------------------------------------------------------------------


def _create_runs(api: str, runs: list[str], big_run: str, latest_run: str) -> None:
    with httpx.Client(base_url=api, timeout=30, headers=_auth()) as http:
        for i, run_id in enumerate([*runs, big_run, latest_run]):
            body = {
                "runId": run_id,
                "displayName": run_id,
                "labels": {"team": TEAMS[i % len(TEAMS)], "tier": f"t{i % 7}"},
                "runPhase": PHASES[(i // len(TEAMS)) % len(PHASES)],
            }
            http.post("/v1/machineLearningRuns", json=body).raise_for_status()


async def _seed_latest(store: StoreCall, run_id: str) -> None:
    """100 metrics of 1000 steps each on one run (10 messages of 10 metrics)."""
    rng = np.random.default_rng(7)
    per_message = MAX_POINTS_PER_MESSAGE // 1000 or 1
    for first in range(0, LATEST_METRICS, per_message):
        series = []
        for m in range(first, min(first + per_message, LATEST_METRICS)):
            steps, times, values = _loss(rng, 0, 1000, tau=300.0)
            series.append(_columns(f"metric_{m:03d}", "host-0", steps, times, values))
        await store([_message(run_id, series)])


async def _vacuum_metric_tables(db: str) -> float:
    conn = await asyncpg.connect(db)
    started = time.perf_counter()
    try:
        tables = await conn.fetch(
            "SELECT c.oid::regclass::text AS name FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'metric\\_%'",
            SCHEMA,
        )
        for table in tables:
            await conn.execute(f"VACUUM (ANALYZE) {table['name']}")
    finally:
        await conn.close()
    return time.perf_counter() - started


@dataclass
class Row:
    """What one size measured."""

    size: int
    stored: int
    big_points: int
    fill_rate: float | None
    ingest_rate: float
    ingest_cpu_us: float
    """CPU µs a point of ingestion, run-registry and PostgreSQL (the median of the tries):
    unlike the rate, what another process's load on the machine does not change."""
    reads: Reads
    bytes_per_point: float


def _parse_sizes(text: str) -> list[int]:
    sizes = [int(float(part)) for part in text.split(",") if part.strip()]
    if sizes != sorted(sizes) or not sizes:
        raise SystemExit("--sizes: ascending point counts, e.g. 0,10000000,100000000")
    return sizes


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=_parse_sizes, default=[0, 10_000_000, 100_000_000])
    parser.add_argument("--slice", type=int, default=1_600_000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--big-share", type=float, default=0.8)
    parser.add_argument("--fill-tasks", type=int, default=3)
    parser.add_argument(
        "--ingest-repeat", type=int, default=3, help="ingest slices per size; the median counts"
    )
    parser.add_argument(
        "--encoding",
        choices=("columnar", "json"),
        default="columnar",
        help="the ingest slice's request bodies: columnar frames (as the SDK sends) or JSON",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the database afterwards (to EXPLAIN reads)"
    )
    return parser.parse_args()


def _fmt_size(points: int) -> str:
    if points >= 1_000_000:
        return f"{points / 1_000_000:g}M"
    return f"{points / 1000:g}k" if points >= 1000 else str(points)


async def main() -> None:  # noqa: PLR0915  # one linear script reads best top to bottom
    """Fill, measure at each size, print the tables."""
    args = _arguments()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="mldiag-scale-"))
    db_name = f"mldiag_scale_{tag}"
    namespace = f"scale{tag}"
    admin = await asyncpg.connect(SERVER)
    pg = await admin.fetchrow(
        "SELECT current_setting('server_version') AS version,"
        " current_setting('shared_buffers') AS buffers,"
        " current_setting('data_directory', true) AS data"
    )
    await admin.close()
    emit(f"# mldiag metrics at scale {datetime.now(UTC):%Y-%m-%d %H:%M}Z")
    emit(f"# machine: {machine_summary()}; code: {_revision()}")
    emit(f"# PostgreSQL {pg['version']} (shared_buffers {pg['buffers']}) {SERVER}, NATS {NATS}")
    emit(
        "# command: .venv/bin/python benchmarks/metrics_scale.py"
        f" --sizes {','.join(str(s) for s in args.sizes)} --slice {args.slice}"
        f" --clients {args.clients} --runs {args.runs} --big-share {args.big_share}"
        f" --fill-tasks {args.fill_tasks} --ingest-repeat {args.ingest_repeat}"
        f" --encoding {args.encoding}" + (" --keep" if args.keep else "")
    )
    data_dir = pg["data"] or "/"
    free = free_disk_bytes(data_dir)
    need = args.sizes[-1] * ASSUMED_BYTES_PER_POINT
    emit(
        f"# disk: {free / 1e9:.1f} GB free at {data_dir};"
        f" the largest size needs ~{need / 1e9:.1f} GB"
    )
    if free < need * 1.3:
        emit(
            f"Not enough disk for {_fmt_size(args.sizes[-1])} points: about {need * 1.3 / 1e9:.1f}"
            f" GB (with a 30% margin for WAL) are needed and {free / 1e9:.1f} GB are free at"
            f" {data_dir}. Pass smaller --sizes, or free some space."
        )
        return
    db = await create_database(SERVER, db_name)
    api_port, ingest_port = free_port(), free_port()
    env = {
        "MLDIAG_NATS_URL": NATS,
        "MLDIAG_NATS_NAMESPACE": namespace,
        "MLDIAG_DATABASE_URL": db,
        "MLDIAG_RUN_REGISTRY_DB_SCHEMA": SCHEMA,
        "MLDIAG_RUN_REGISTRY_PORT": str(api_port),
        "MLDIAG_INGESTION_PORT": str(ingest_port),
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": os.environ.setdefault(
            "MLDIAG_BENCH_TOKEN", "mldiag_" + secrets.token_urlsafe(32)
        ),
    }
    api, ingestion = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ingest_port}"
    rows: list[Row] = []
    try:
        with (
            process([PYTHON, "-m", "mldiag_run_registry"], env, tmp / "registry.log") as registry,
            process([PYTHON, "-m", "mldiag_ingestion"], env, tmp / "ingestion.log") as ingester,
        ):
            wait_http(f"{api}/healthz")
            wait_http(f"{ingestion}/healthz")
            runs = [f"r{i:05d}-{tag}" for i in range(args.runs)]
            big_run, latest_run = f"big-{tag}", f"latest-{tag}"
            started = time.perf_counter()
            _create_runs(api, runs, big_run, latest_run)
            emit(
                f"# {len(runs) + 2} runs created over HTTP in {time.perf_counter() - started:.1f} s"
            )
            pool = await create_pool(
                DatabaseSettings(
                    url=db, pool_min_size=1, pool_max_size=max(args.fill_tasks, 1) + 1
                ),
                SCHEMA,
            )
            store = _store_call(MetricsRepository(pool, SCHEMA))
            await _seed_latest(store, latest_run)
            conn = await asyncpg.connect(db)
            pids = [ingester.pid, registry.pid]
            # A process's first writes pay for its connections, prepared statements and
            # JetStream consumer; warm them so the empty store's rate is the steady one.
            create_run(api, f"warmup-{tag}", _auth())
            await _ingest(
                ingestion, f"warmup-{tag}", db, 200_000, args.clients, pids, args.encoding
            )
            filled = Filled()
            rng = np.random.default_rng(2026)
            tau = max(args.sizes[-1] * args.big_share / 5, 1.0)
            reference: float | None = None
            bytes_per_point = float(ASSUMED_BYTES_PER_POINT)
            for index, size in enumerate(args.sizes):
                emit()
                load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
                emit(f"## size {_fmt_size(size)} ({size:,} points); load average {load}")
                fill_rate = None
                if size > (already := filled.big_points + filled.run_steps * len(runs) * METRICS):
                    free = free_disk_bytes(data_dir)
                    coming = size - already + args.slice * args.ingest_repeat
                    need = int(coming * bytes_per_point * 1.3)
                    if free < need:
                        emit(
                            f"Stopping before {_fmt_size(size)}: the fill needs about"
                            f" {need / 1e9:.1f} GB ({bytes_per_point:.0f} bytes a point as"
                            f" measured, 30% margin) and {free / 1e9:.1f} GB are free."
                        )
                        break
                    big_target = max(int(size * args.big_share), filled.big_points)
                    run_target = max((size - big_target) // (len(runs) * METRICS), filled.run_steps)
                    batches = _chain(
                        _big_batches(rng, big_run, filled.big_points, big_target, tau),
                        _run_batches(rng, runs, filled.run_steps, run_target),
                    )
                    points = (big_target - filled.big_points) + (
                        run_target - filled.run_steps
                    ) * len(runs) * METRICS
                    seconds = await _fill(store, batches, args.fill_tasks, points)
                    fill_rate = points / seconds if seconds else None
                    filled = Filled(big_target, run_target)
                    vacuum = await _vacuum_metric_tables(db)
                    emit(
                        f"fill: {points:,} points in {seconds:.1f} s"
                        f" ({points / seconds:,.0f} points/s, {args.fill_tasks} tasks);"
                        f" VACUUM (ANALYZE) of the metric tables {vacuum:.1f} s"
                    )
                stored = await committed_points(conn, SCHEMA)
                reads = _reads(api, big_run, filled.big_points, latest_run)
                emit(
                    f"reads (median of {REPEAT}, ms): chart {reads.chart:.1f}"
                    f" (withTimes {reads.chart_times:.1f}) of {filled.big_points:,} points,"
                    f" zoom 1% {reads.zoom:.1f}, latest of {reads.latest_count} {reads.latest:.1f},"
                    f" run list ({reads.run_list_count} of {len(runs) + 2} runs)"
                    f" {reads.run_list:.1f}"
                )
                rates, costs = [], []
                for attempt in range(args.ingest_repeat):
                    slice_run = f"slice{index}-{attempt}-{tag}"
                    create_run(api, slice_run, _auth())
                    points, seconds, cpu = await _ingest(
                        ingestion, slice_run, db, args.slice, args.clients, pids, args.encoding
                    )
                    rates.append(points / seconds)
                    costs.append(sum(cpu) / points * 1e6)
                    emit(
                        f"ingest: {points:,} points in {seconds:.2f} s ="
                        f" {points / seconds:,.0f} points/s; CPU s ingestion {cpu[0]:.1f},"
                        f" run-registry {cpu[1]:.1f}, PostgreSQL {cpu[2]:.1f}"
                        f" = {costs[-1]:.2f} CPU µs a point"
                    )
                rate = statistics.median(rates)
                reference = reference or rate
                emit(
                    f"ingest, median of {len(rates)}: {rate:,.0f} points/s"
                    f" ({rate / reference:.0%} of the empty store's)"
                )
                stored = await committed_points(conn, SCHEMA)
                sizes = await relation_sizes(conn, SCHEMA, "metric_")
                total_bytes = sum(sizes.values())
                bytes_per_point = total_bytes / stored if stored else float("nan")
                emit(
                    f"disk: {total_bytes / 1e6:,.1f} MB for {stored:,} points ="
                    f" {bytes_per_point:.1f} bytes/point"
                )
                for table, nbytes in sorted(sizes.items(), key=lambda item: -item[1]):
                    emit(
                        f"  {table:<40}{nbytes / 1e6:>12,.1f} MB"
                        f"{nbytes / stored if stored else 0:>10.1f} B/pt"
                    )
                rows.append(
                    Row(
                        size,
                        stored,
                        filled.big_points,
                        fill_rate,
                        rate,
                        statistics.median(costs),
                        reads,
                        bytes_per_point,
                    )
                )
            await conn.close()
            await pool.close()
        _summary(rows, reference)
    except Exception:
        for log in ("registry.log", "ingestion.log"):
            with contextlib.suppress(OSError):
                tail = (tmp / log).read_text(errors="replace").splitlines()[-20:]
                emit(f"--- last lines of {log}")
                for line in tail:
                    emit(line)
        raise
    finally:
        if args.keep:
            emit(f"# database kept: {db} (schema {SCHEMA}); drop it with DROP DATABASE {db_name}")
        else:
            await drop_database(SERVER, db_name)
        await drop_streams(NATS, namespace)
        shutil.rmtree(tmp, ignore_errors=True)


def _revision() -> str:
    """The checkout's commit, marked when files differ from it (others' edits included)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],  # noqa: S607  # git from PATH
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"{head} + uncommitted changes" if dirty else head


def _chain(
    *iterators: Iterator[list[MetricPointsReceived]],
) -> Iterator[list[MetricPointsReceived]]:
    for iterator in iterators:
        yield from iterator


def _summary(rows: list[Row], reference: float | None) -> None:
    emit()
    emit("## cost growth (reads: HTTP to the registry, median of 31 ms)")
    header = (
        f"{'size':>6}{'stored pts':>13}{'big series':>12}{'ingest pts/s':>14}{'vs empty':>9}"
        f"{'CPU µs/pt':>10}"
        f"{'chart':>8}{'+times':>8}{'zoom':>8}{'latest':>8}{'run list':>9}{'B/point':>9}"
    )
    emit(header)
    for row in rows:
        ratio = row.ingest_rate / reference if reference else float("nan")
        emit(
            f"{_fmt_size(row.size):>6}{row.stored:>13,}{row.big_points:>12,}"
            f"{row.ingest_rate:>14,.0f}{ratio:>9.0%}{row.ingest_cpu_us:>10.2f}{row.reads.chart:>8.1f}"
            f"{row.reads.chart_times:>8.1f}{row.reads.zoom:>8.1f}{row.reads.latest:>8.1f}"
            f"{row.reads.run_list:>9.1f}{row.bytes_per_point:>9.1f}"
        )
    emit(
        f"{'goal':>6}{'':>13}{'':>12}{'':>14}{'>= 80%':>9}{'':>10}{'<= 50':>8}{'<= 50':>8}"
        f"{'<= 50':>8}{'<= 50':>8}{'<= 50':>9}{'<= 24':>9}"
    )
    emit("(goal: reads flat, <= 50 ms at 100M; ingest within 20% of the empty store's rate;")
    emit(" <= 24 bytes per stored point including rollups, indexes and the ledger)")


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # so the clean-up in main's finally runs


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    asyncio.run(main())

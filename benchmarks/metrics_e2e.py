# The driver runs one step at a time; blocking clients inside it are the measurement, not
# a concurrency bug, and it polls the database on purpose.
# ruff: noqa: ASYNC110, ASYNC212, ASYNC221
"""Metrics end to end, side by side in one run: mldiag vs raw COPY vs an MLflow server.

Run: ``.venv/bin/python benchmarks/metrics_e2e.py [--points N] [--clients C]
[--mlflow-points M] [--read-points R] [--skip-mlflow]``

Stack: ingestion and run-registry as real processes (``python -m ...``, uvicorn) against the
machine's NATS (``MLDIAG_BENCH_NATS_URL``, a fresh namespace) and PostgreSQL
(``MLDIAG_BENCH_DATABASE_URL``, a fresh database), so all three contenders share one
PostgreSQL. The event-detector is not started: it is not on the storage path.

1. ingest: C client processes POST 10k-point batches (10 metrics x 1000 steps, with times)
   over HTTP to ingestion → JetStream → run-registry → PostgreSQL; the clock stops when the
   registry's ledger says every point is committed.
   (a) raw COPY of the same points into the same table, one connection;
   (b) MLflow: ``mlflow server`` on the same PostgreSQL (own database), C client processes
   calling ``MlflowClient().log_batch`` with 1000 metrics per call. MLflow and psycopg2
   live in ``benchmarks/.venv-mlflow`` (created with uv on first use, git-ignored).
2. reads: an R-point series downsampled to 1000 buckets and the latest values of 100
   metrics, through the registry's HTTP API (median of many); MLflow's
   ``get_metric_history`` of its M-point series, and mldiag's downsample of the same M points.
"""

import argparse
import asyncio
import json
import logging
import os
import secrets
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import asyncpg
import httpx
import numpy as np
import structlog
from _support import (
    committed_points,
    create_run,
    emit,
    free_port,
    machine_summary,
    median_get_ms,
    process,
    start_clients,
    wait_http,
)

from mldiag_platform.database import create_pool
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_schemas.columnar import CONTENT_TYPE, encode_frame
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived, to_unix_micros

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable
NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MLFLOW_VENV = HERE / ".venv-mlflow"
STEPS_PER_REQUEST = 1000
METRICS = 10
SCHEMA = "bench_registry"


def _auth() -> dict[str, str]:
    """The benchmark's admin token (set by ``main``, inherited by the client processes)."""
    return {"Authorization": f"Bearer {os.environ['MLDIAG_BENCH_TOKEN']}"}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_BASE_US = to_unix_micros(datetime(2026, 1, 1, tzinfo=UTC))


def _json_body(client: int, block: range) -> bytes:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    times = [(base + timedelta(milliseconds=s)).isoformat() for s in block]
    series = [
        {
            "name": f"m{m}",
            "host": f"client-{client}",
            "steps": list(block),
            "values": [s * 0.001 + m for s in block],
            "times": times,
        }
        for m in range(METRICS)
    ]
    return json.dumps({"series": series}).encode()


def _frame_body(client: int, block: range) -> bytes:
    # array, as the SDK builds it: no per-point objects kept, one packed column per series
    steps = array("q", block)
    times = array("q", (_BASE_US + s * 1000 for s in block))
    metas = [{"name": f"m{m}", "host": f"client-{client}"} for m in range(METRICS)]
    columns = [(steps, array("d", (s * 0.001 + m for s in block)), times) for m in range(METRICS)]
    return encode_frame({"series": metas}, columns)


def _client_bodies(client: int, steps: int, encoding: str) -> list[bytes]:
    """The client's requests, built before the clock starts (bytes only: 16M points as
    frames are 384 MB, as Python objects they would not fit)."""
    build = _frame_body if encoding == "columnar" else _json_body
    return [
        build(client, range(start, min(start + STEPS_PER_REQUEST, (client + 1) * steps)))
        for start in range(client * steps, (client + 1) * steps, STEPS_PER_REQUEST)
    ]


async def _ingest_mldiag(
    ingestion: str, run_id: str, db: str, points: int, clients: int, encoding: str
) -> float:
    steps = points // METRICS // clients
    url = f"{ingestion}/v1/machineLearningRuns/{run_id}/metrics:write"
    content_type = CONTENT_TYPE if encoding == "columnar" else "application/json"
    builds = [partial(_client_bodies, c, steps, encoding) for c in range(clients)]
    procs, go = await start_clients(url, builds, content_type, os.environ["MLDIAG_BENCH_TOKEN"])
    pool = await asyncpg.create_pool(db, min_size=1, max_size=1)
    total = steps * METRICS * clients
    started = time.perf_counter()
    go.set()
    while await committed_points(pool, SCHEMA) < total:
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - started
    for proc in procs:
        proc.join()
    await pool.close()
    return elapsed


_COPY_ROW = np.dtype(
    [
        ("fields", ">i2"),
        ("series_len", ">i4"),
        ("series_id", ">i8"),
        ("step_len", ">i4"),
        ("step", ">i8"),
        ("time_len", ">i4"),
        ("time_us", ">i8"),
        ("value_len", ">i4"),
        ("value", ">f8"),
    ]
)
"""A row of PostgreSQL's binary COPY format: (series_id, step, time_us, value)."""
_COPY_ROWS_PER_PART = 1 << 20


async def _copy_parts(points: int) -> AsyncIterator[bytes]:
    """The points of the benchmark as binary COPY data, a million rows at a time (numpy
    writes each part in milliseconds: the figure is PostgreSQL's, not the generator's)."""
    yield b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    steps = points // METRICS
    for m in range(METRICS):
        for start in range(0, steps, _COPY_ROWS_PER_PART):
            block = np.arange(start, min(start + _COPY_ROWS_PER_PART, steps), dtype=np.int64)
            rows = np.empty(len(block), _COPY_ROW)
            rows["fields"] = 4
            rows["series_len"] = rows["step_len"] = rows["time_len"] = rows["value_len"] = 8
            rows["series_id"] = m
            rows["step"] = block
            rows["time_us"] = _BASE_US + block * 1000
            rows["value"] = block * 0.001 + m
            yield rows.tobytes()
    yield struct.pack(">h", -1)


async def _raw_copy(db: str, points: int) -> float:
    """COPY of the same points into a narrow table of its own, one row per point with the
    index a point store needs: the database's limit, whatever the registry's layout."""
    conn = await asyncpg.connect(db)
    await conn.execute(
        "CREATE SCHEMA raw_copy; CREATE TABLE raw_copy.points (series_id bigint NOT NULL,"
        " step bigint NOT NULL, time_us bigint NOT NULL, value float8 NOT NULL);"
        " CREATE INDEX ON raw_copy.points (series_id, step, time_us)"
    )
    started = time.perf_counter()
    await conn.copy_to_table(
        "points",
        source=_copy_parts(points),
        columns=("series_id", "step", "time_us", "value"),
        schema_name="raw_copy",
        format="binary",
    )
    elapsed = time.perf_counter() - started
    await conn.execute("DROP SCHEMA raw_copy CASCADE")
    await conn.close()
    return elapsed


def _mlflow_python() -> Path:
    python = MLFLOW_VENV / "bin" / "python"
    if not python.exists():
        # uv from PATH, else the one `make` installs into .tools on a fresh machine
        uv = shutil.which("uv") or str(HERE.parent / ".tools" / "bin" / "uv")
        subprocess.run([uv, "venv", "-q", str(MLFLOW_VENV), "--python", "3.11"], check=True)
        subprocess.run(
            [uv, "pip", "install", "-q", "--python", str(python), "mlflow", "psycopg2-binary"],
            check=True,
        )
    return python


def _mlflow(python: Path, uri: str, points: int, clients: int, tmp: Path) -> tuple[float, str]:
    client = str(HERE / "_mlflow_client.py")
    run_id = subprocess.run(
        [str(python), client, "setup", uri], check=True, capture_output=True, text=True
    ).stdout.strip()
    go = tmp / "mlflow-go"
    per = points // clients
    procs = [
        subprocess.Popen([str(python), client, "log", uri, run_id, str(c * per), str(per), str(go)])
        for c in range(clients)
    ]
    time.sleep(8.0)  # imports of mlflow take seconds; start everyone together
    started = time.perf_counter()
    go.touch()
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError("an MLflow client failed")
    return time.perf_counter() - started, run_id


async def _seed_reads(db: str, runs: dict[str, int]) -> None:
    """Store series for the read benchmarks straight through the registry's repository."""
    pool = await create_pool(DatabaseSettings(url=db, pool_min_size=1, pool_max_size=2), SCHEMA)
    repository = MetricsRepository(pool, SCHEMA)
    base = to_unix_micros(datetime(2026, 1, 1, tzinfo=UTC))
    for run_id, count in runs.items():
        for start in range(0, count, 5000 * 40):
            messages = []
            for chunk in range(start, min(start + 5000 * 40, count), 5000):
                steps = list(range(chunk, min(chunk + 5000, count)))
                values = [s * 0.001 for s in steps]
                messages.append(
                    MetricPointsReceived(
                        run_id=run_id,
                        batch_id=uuid.uuid4(),
                        chunk=0,
                        series=[
                            MetricColumns(
                                name="loss",
                                steps=steps,
                                values=values,
                                times_unix_us=[base + s for s in steps],
                            )
                        ],
                    )
                )
            await repository.store_messages(messages, {run_id: "default"})
    await pool.close()


async def _seed_latest(db: str, run_id: str) -> None:
    pool = await create_pool(DatabaseSettings(url=db, pool_min_size=1, pool_max_size=2), SCHEMA)
    message = MetricPointsReceived(
        run_id=run_id,
        batch_id=uuid.uuid4(),
        chunk=0,
        series=[
            MetricColumns(name=f"metric_{m:03d}", steps=list(range(50)), values=[m * 1.0] * 50)
            for m in range(100)
        ],
    )
    await MetricsRepository(pool, SCHEMA).store_messages([message], {run_id: "default"})
    await pool.close()


async def main() -> None:  # noqa: PLR0915  # one linear script reads best top to bottom
    """Run everything and print the tables."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--mlflow-points", type=int, default=200_000)
    parser.add_argument("--read-points", type=int, default=1_000_000)
    parser.add_argument("--skip-mlflow", action="store_true")
    parser.add_argument(
        "--encoding",
        choices=("columnar", "json"),
        default="columnar",
        help="how the clients send their points: binary frames (the SDK's) or JSON",
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="mldiag-bench-"))
    admin = await asyncpg.connect(SERVER)
    db_name, mlflow_db = f"mldiag_bench_{tag}", f"mlflow_bench_{tag}"
    await admin.execute(f'CREATE DATABASE "{db_name}"')
    await admin.execute(f'CREATE DATABASE "{mlflow_db}"')
    server_base = SERVER.rpartition("/")[0]
    db = f"{server_base}/{db_name}"
    api_port, ingest_port, mlflow_port = free_port(), free_port(), free_port()
    env = {
        "MLDIAG_NATS_URL": NATS,
        "MLDIAG_NATS_NAMESPACE": f"bench{tag}",
        "MLDIAG_DATABASE_URL": db,
        "MLDIAG_RUN_REGISTRY_DB_SCHEMA": SCHEMA,
        "MLDIAG_RUN_REGISTRY_PORT": str(api_port),
        "MLDIAG_INGESTION_PORT": str(ingest_port),
        # OTLP is not measured here; its fixed ports may be taken by another stack
        "MLDIAG_INGESTION_OTLP_ENABLED": "false",
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": os.environ.setdefault(
            "MLDIAG_BENCH_TOKEN", "mldiag_" + secrets.token_urlsafe(32)
        ),
    }
    api, ingestion = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ingest_port}"
    emit(
        f"# mldiag metrics benchmark {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {os.cpu_count()} CPUs,"
        f" PostgreSQL {SERVER}, NATS {NATS}"
    )
    emit(f"# machine: {machine_summary()}")
    emit(
        "# command: .venv/bin/python benchmarks/metrics_e2e.py"
        f" --points {args.points} --clients {args.clients} --mlflow-points {args.mlflow_points}"
        f" --read-points {args.read_points} --encoding {args.encoding}"
        + (" --skip-mlflow" if args.skip_mlflow else "")
    )
    try:
        with (
            process([PYTHON, "-m", "mldiag_run_registry"], env, tmp / "registry.log") as registry,
            process([PYTHON, "-m", "mldiag_ingestion"], env, tmp / "ingestion.log") as ingester,
        ):
            wait_http(f"{api}/healthz")
            wait_http(f"{ingestion}/healthz")
            run_id = f"bench-{tag}"
            create_run(api, run_id, _auth())
            cpu = [_cpu_seconds(p.pid) for p in (ingester, registry)]
            mldiag_s = await _ingest_mldiag(
                ingestion, run_id, db, args.points, args.clients, args.encoding
            )
            cpu = [_cpu_seconds(p.pid) - c for p, c in zip((ingester, registry), cpu, strict=True)]
            copy_s = await _raw_copy(db, args.points)
            rows = [
                (
                    f"mldiag ({args.encoding}): HTTP → ingestion → JetStream → registry → PG",
                    args.points,
                    mldiag_s,
                ),
                ("raw COPY, a row per point, (series, step, time) index", args.points, copy_s),
            ]
            mlflow_run = ""
            if not args.skip_mlflow:
                python = _mlflow_python()
                mlflow_cmd = [
                    str(MLFLOW_VENV / "bin" / "mlflow"), "server",
                    "--backend-store-uri", f"postgresql+psycopg2://postgres@{server_base.split('@')[-1]}/{mlflow_db}",
                    "--host", "127.0.0.1", "--port", str(mlflow_port),
                    "--artifacts-destination", str(tmp / "mlflow-artifacts"),
                ]  # fmt: skip
                with process(mlflow_cmd, {}, tmp / "mlflow.log"):
                    uri = f"http://127.0.0.1:{mlflow_port}"
                    wait_http(f"{uri}/health", timeout=120)
                    mlflow_s, mlflow_run = _mlflow(
                        python, uri, args.mlflow_points, args.clients, tmp
                    )
                    rows.append(("MLflow server: log_batch x1000", args.mlflow_points, mlflow_s))
                    reader = [str(python), str(HERE / "_mlflow_client.py"), "read", uri]
                    mlflow_read = subprocess.run(
                        [*reader, mlflow_run, "3"], check=True, capture_output=True, text=True
                    ).stdout.split()
            emit()
            emit(
                f"## ingest ({args.clients} client processes sending {args.encoding} bodies,"
                " counted when committed)"
            )
            emit(f"{'path':<68}{'points':>11}{'seconds':>9}{'points/s':>12}")
            for label, count, seconds in rows:
                emit(f"{label:<68}{count:>11,}{seconds:>9.2f}{count / seconds:>12,.0f}")
            mldiag_rate = args.points / mldiag_s
            emit(f"mldiag / raw COPY: {mldiag_rate / (args.points / copy_s):.0%}")
            emit(
                f"CPU seconds during the mldiag ingest: ingestion {cpu[0]:.1f},"
                f" run-registry {cpu[1]:.1f} (wall {mldiag_s:.1f}, {os.cpu_count()} CPUs)"
            )
            emit(
                f"ingest CPU per point: {sum(cpu) / args.points * 1e6:.2f} µs"
                f" (ingestion {cpu[0] / args.points * 1e6:.2f},"
                f" run-registry {cpu[1] / args.points * 1e6:.2f}; PostgreSQL and NATS not counted)"
            )
            if not args.skip_mlflow:
                emit(f"mldiag / MLflow: {mldiag_rate / (args.mlflow_points / mlflow_s):.1f}x")

            read_run, same_run, latest_run = f"read-{tag}", f"same-{tag}", f"latest-{tag}"
            for name in (read_run, same_run, latest_run):
                create_run(api, name, _auth())
            await _seed_reads(db, {read_run: args.read_points, same_run: args.mlflow_points})
            await _seed_latest(db, latest_run)
            # autovacuum analyses freshly bulk-loaded tables within a minute or so; do it now
            # so the reads use their steady-state plans
            analyze = await asyncpg.connect(db)
            await analyze.execute(
                "ANALYZE"
            )  # every table of the fresh database, whatever the store
            await analyze.close()
            with httpx.Client(base_url=api, timeout=30, headers=_auth()) as http:
                series = f"/v1/machineLearningRuns/{read_run}/metrics/loss"
                # the first reads warm the connection and the caches
                down = median_get_ms(http, series, 51, {"buckets": 1000}, warmup=5)
                same = median_get_ms(
                    http, f"/v1/machineLearningRuns/{same_run}/metrics/loss", 51, {"buckets": 1000}
                )
                page = median_get_ms(http, series, 21, {"pageSize": 10_000})
                latest_url = f"/v1/machineLearningRuns/{latest_run}/metrics:latest"
                latest = median_get_ms(http, latest_url, 51, warmup=5)
                count = len(http.get(latest_url).json()["values"])
            emit()
            emit("## reads (HTTP to the registry, median of 51)")
            emit(f"{'query':<64}{'ms':>10}")
            emit(f"{f'mldiag: {args.read_points:,}-point series → 1000 buckets':<64}{down:>10.1f}")
            emit(f"{f'mldiag: latest value of {count} metrics':<64}{latest:>10.1f}")
            emit(f"{'mldiag: first raw page (10,000 points) of that series':<64}{page:>10.1f}")
            emit(
                f"{f'mldiag: {args.mlflow_points:,}-point series → 1000 buckets':<64}{same:>10.1f}"
            )
            if not args.skip_mlflow:
                seconds, points = float(mlflow_read[0]), int(mlflow_read[1])
                label = f"MLflow: get_metric_history, {points:,} points (median of 3)"
                emit(f"{label:<64}{seconds * 1000:>10.1f}")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        await admin.execute(f'DROP DATABASE IF EXISTS "{mlflow_db}" WITH (FORCE)')
        await admin.close()
        await _drop_streams(f"bench{tag}")
        shutil.rmtree(tmp, ignore_errors=True)


async def _drop_streams(namespace: str) -> None:
    import nats  # noqa: PLC0415

    client = await nats.connect(NATS)
    try:
        js = client.jetstream()
        for info in await js.streams_info():
            name = info.config.name or ""
            if name.startswith(namespace.upper() + "_"):
                await js.delete_stream(name)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main())

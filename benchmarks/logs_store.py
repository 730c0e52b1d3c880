"""Log storage, side by side in one run: mldiag's compressed chunks vs one row per line.

Run: ``.venv/bin/python benchmarks/logs_store.py [--lines N] [--batch B] [--hosts H]``

Both contenders share one PostgreSQL (``MLDIAG_BENCH_DATABASE_URL``, a fresh database) and
the same N lines of a training job's output (H hosts; step lines with loss, learning rate,
throughput; data-loader and checkpoint lines; NCCL chatter; warnings on stderr; a few
tracebacks), shipped in batches of B lines per host as ``mldiag run`` ships them.

1. write: mldiag through ``LogsService.store`` (chunking, compression, the one-statement
   insert the bus handler runs) vs the naive table filled by COPY, the fastest way in;
   lines per second each.
2. size: ``pg_total_relation_size`` (heap, TOAST and every index) per line each.
3. search: every line matching a rare regex (``grep`` over all N lines), through
   ``LogsService.list_logs`` paging to the end vs ``text ~ $1 ORDER BY time`` on the naive
   table (its index cannot help a regex); plus the first page of 1000 lines each.
"""

import argparse
import asyncio
import logging
import os
import random
import time
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog
from _support import create_database, drop_database, emit

from mldiag_platform.database import apply_migrations, create_pool, load_migrations
from mldiag_platform.settings import DatabaseSettings
from mldiag_run_registry.logs.chunks import SEVERITIES
from mldiag_run_registry.logs.repository import LogsRepository
from mldiag_run_registry.logs.service import LogsService, parse_query
from mldiag_schemas.logs import SEVERITY_ORDER, LogLine, LogLinesReceived, LogSeverity, LogStream
from mldiag_schemas.runs import Run

SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SCHEMA = "bench_logs"
RUN_ID = "bench-run"
T0 = datetime(2026, 6, 1, tzinfo=UTC)
RARE = r"CUDA error: an illegal memory access|ECC error"

_NAIVE_SQL = """
CREATE TABLE log_lines (
    run_id text NOT NULL,
    batch_id uuid NOT NULL,
    index integer NOT NULL,
    time timestamptz NOT NULL,
    host text NOT NULL,
    stream text NOT NULL,
    severity smallint NOT NULL,
    pid integer,
    process_index integer,
    text text NOT NULL,
    PRIMARY KEY (batch_id, index)
);
CREATE INDEX log_lines_by_time ON log_lines (run_id, time);
"""


class OneRun:
    """The run lookup, for one active run."""

    async def get_run(self, _project: str, _location: str, run_id: str) -> Run:
        return Run.model_construct(run_id=run_id, end_time=None)  # type: ignore[call-arg]


def _text(rng: random.Random, step: int, rank: int) -> tuple[str, LogStream, LogSeverity]:
    roll = rng.random()
    if roll < 0.70:
        loss = 2.0 * 0.9999**step + rng.gauss(0, 0.02)
        return (
            f"[rank{rank}] step {step:>7d} | loss {loss:.4f} | lr {3e-4 * 0.99999**step:.3e}"
            f" | grad_norm {abs(rng.gauss(0.9, 0.2)):.3f} | tokens/s"
            f" {rng.gauss(152_000, 3_000):,.1f} | mfu {rng.gauss(41, 1):.1f}%",
            LogStream.STDOUT,
            LogSeverity.INFO,
        )
    if roll < 0.80:
        return (
            f"[rank{rank}] dataloader: worker {rng.randrange(8)} fetched shard"
            f" gs://corpus/train-{rng.randrange(4096):05d}-of-04096.tfrecord"
            f" in {rng.expovariate(20):.3f}s",
            LogStream.STDOUT,
            LogSeverity.DEFAULT,
        )
    if roll < 0.88:
        return (
            f"host{rank // 8}:{1000 + rank}:{1100 + rank} [{rank % 8}] NCCL INFO Channel"
            f" {rng.randrange(32):02d}/0 : {rank} -> {(rank + 1) % 64} via P2P/IPC/read",
            LogStream.STDERR,
            LogSeverity.DEFAULT,
        )
    if roll < 0.95:
        return (
            f"[rank{rank}] saving checkpoint step {step} to /ckpt/run-7/step_{step:08d}"
            f" ({rng.randrange(1, 64)} of 64 shards)",
            LogStream.STDOUT,
            LogSeverity.INFO,
        )
    if roll < 0.9999:
        return (
            f"/usr/lib/python3.11/site-packages/torch/distributed/fsdp/_init_utils.py:"
            f"{rng.randrange(300, 900)}: UserWarning: FSDP is switching to use"
            " `NO_SHARD` instead of ShardingStrategy.FULL_SHARD since the world size is 1.",
            LogStream.STDERR,
            LogSeverity.WARNING,
        )
    return (
        rng.choice(
            [
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                f"[rank{rank}] Xid 48: ECC error on GPU {rank % 8}, page retired",
            ]
        ),
        LogStream.STDERR,
        LogSeverity.ERROR,
    )


def make_batches(lines: int, batch: int, hosts: int) -> list[LogLinesReceived]:
    """``lines`` lines as batches of ``batch`` lines per host, in shipping order."""
    rng = random.Random(7)  # noqa: S311  # the same lines every run, not secrets
    messages = []
    made = 0
    second = 0
    while made < lines:
        for host in range(hosts):
            count = min(batch, lines - made)
            if count <= 0:
                break
            start = T0 + timedelta(seconds=second)
            written = []
            for i in range(count):
                step = (second * batch + i) // 4
                text, stream, severity = _text(rng, step, host * 8 + i % 8)
                written.append(
                    LogLine(
                        time=start + timedelta(microseconds=i * 997 + rng.randrange(500)),
                        host=f"gke-train-pool-{host:02d}",
                        stream=stream,
                        severity=severity,
                        text=text,
                        pid=4000 + i % 8,
                        process_index=i % 8,
                    )
                )
            messages.append(LogLinesReceived(run_id=RUN_ID, event_id=uuid.uuid4(), lines=written))
            made += count
        second += 1
    return messages


def _raw(messages: list[LogLinesReceived]) -> int:
    return sum(len(line.text.encode()) + 1 for m in messages for line in m.lines)


async def _size(pool: asyncpg.Pool, table: str) -> int:
    size: int = await pool.fetchval(f"SELECT pg_total_relation_size('{SCHEMA}.{table}')")
    return size


async def _write(
    pool: asyncpg.Pool, service: LogsService, messages: list[LogLinesReceived]
) -> tuple[float, float]:
    """Seconds to store every batch as chunks, and as rows by COPY."""
    started = time.perf_counter()
    for i in range(0, len(messages), 10):  # the bus handler stores what one pull brought
        await service.store(messages[i : i + 10])
    chunk_write = time.perf_counter() - started

    started = time.perf_counter()
    for message in messages:
        records = [
            (
                RUN_ID,
                message.event_id,
                index,
                line.time,
                line.host,
                line.stream.value,
                SEVERITY_ORDER[line.severity],
                line.pid,
                line.process_index,
                line.text,
            )
            for index, line in enumerate(message.lines)
        ]
        await pool.copy_records_to_table("log_lines", records=records, schema_name=SCHEMA)
    naive_write = time.perf_counter() - started
    return chunk_write, naive_write


async def bench(lines: int, batch: int, hosts: int) -> None:
    """Write, size and search both ways; print the figures."""
    messages = make_batches(lines, batch, hosts)
    db_name = f"mldiag_bench_logs_{uuid.uuid4().hex[:8]}"
    url = await create_database(SERVER, db_name)
    pool = await create_pool(DatabaseSettings(url=url, pool_min_size=1, pool_max_size=2), SCHEMA)
    try:
        migrations = load_migrations("run-registry-logs", "mldiag_run_registry.logs.migrations")
        await apply_migrations(pool, SCHEMA, migrations)
        await pool.execute(_NAIVE_SQL)
        service = LogsService(LogsRepository(pool), OneRun())

        chunk_write, naive_write = await _write(pool, service, messages)
        await pool.execute("VACUUM ANALYZE log_chunks")
        await pool.execute("VACUUM ANALYZE log_lines")
        chunk_bytes, naive_bytes = await _size(pool, "log_chunks"), await _size(pool, "log_lines")

        query = parse_query(grep=RARE)
        started = time.perf_counter()
        found, token = 0, ""
        while True:
            page = await service.list_logs("default", "local", RUN_ID, query, 1000, token)
            found += len(page.entries)
            if not page.entries and page.next_page_token == token:
                break
            token = page.next_page_token
        chunk_grep = time.perf_counter() - started

        started = time.perf_counter()
        rows = await pool.fetch(
            "SELECT time, host, stream, severity, text FROM log_lines WHERE run_id = $1"
            " AND text ~ $2 ORDER BY time, batch_id, index",
            RUN_ID,
            RARE,
        )
        naive_entries = [
            {"time": r["time"], "host": r["host"], "stream": r["stream"], "text": r["text"]}
            | {"severity": SEVERITIES[r["severity"]]}
            for r in rows
        ]
        naive_grep = time.perf_counter() - started

        started = time.perf_counter()
        first = await service.list_logs("default", "local", RUN_ID, parse_query(), 1000)
        chunk_first = time.perf_counter() - started
        started = time.perf_counter()
        await pool.fetch(
            "SELECT * FROM log_lines WHERE run_id = $1 ORDER BY time, batch_id, index LIMIT 1000",
            RUN_ID,
        )
        naive_first = time.perf_counter() - started

        emit(f"lines: {lines:,} ({hosts} hosts, {batch} a batch); {_raw(messages) / lines:.1f} B")
        emit(f"{'':>22} {'chunks (mldiag)':>18} {'row per line':>16}")
        emit(f"{'bytes per line':>22} {chunk_bytes / lines:>18.1f} {naive_bytes / lines:>16.1f}")
        emit(f"{'write lines/s':>22} {lines / chunk_write:>18,.0f} {lines / naive_write:>16,.0f}")
        emit(f"{'grep all (s)':>22} {chunk_grep:>18.2f} {naive_grep:>16.2f}")
        emit(f"{'first 1000 lines (ms)':>22} {chunk_first * 1e3:>18.1f} {naive_first * 1e3:>16.1f}")
        emit(f"matches: {found} vs {len(naive_entries)}; first page {len(first.entries)} lines")
        if found != len(naive_entries):
            raise SystemExit("the two stores disagree")
    finally:
        await pool.close()
        await drop_database(SERVER, db_name)


def main() -> None:
    """Parse the arguments and run."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500, help="lines per batch and host")
    parser.add_argument("--hosts", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(bench(args.lines, args.batch, args.hosts))


if __name__ == "__main__":
    main()

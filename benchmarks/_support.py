"""What the benchmark scripts share: printing, free ports, the services as processes, and
percentiles, a fresh database and the clean-up of a namespace's streams.

Benchmarks run as scripts (``.venv/bin/python benchmarks/NAME.py``), so their own folder is
on ``sys.path`` and ``import _support`` finds this file.
"""

import asyncio
import contextlib
import multiprocessing
import multiprocessing.process
import multiprocessing.synchronize
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    import asyncpg


def emit(line: str = "") -> None:
    """Print a line of figures at once (a run can take minutes)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def free_port() -> int:
    """A port nothing listens on at the moment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http(url: str, timeout: float = 60.0) -> None:
    """Return once ``url`` answers 200; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy")


def create_run(api: str, run_id: str, headers: Mapping[str, str]) -> None:
    """Register the run ``run_id`` (displayed by its id) with the registry at ``api``."""
    response = httpx.post(
        f"{api}/v1/machineLearningRuns",
        json={"runId": run_id, "displayName": run_id},
        timeout=10,
        headers=dict(headers),
    )
    response.raise_for_status()


def median_get_ms(
    http: httpx.Client,
    url: str,
    repeat: int,
    params: Mapping[str, str | int] | None = None,
    warmup: int = 0,
) -> float:
    """The median time in ms of ``repeat`` GETs of ``url``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        http.get(url, params=params).raise_for_status()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        http.get(url, params=params).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` with ``env`` added, output to ``log``; terminate it (then kill) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env={**os.environ, **env}, stdout=out, stderr=out)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0 to 100) of ``samples``, linear between the closest ranks."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no samples")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


async def drop_streams(nats_url: str, namespace: str) -> None:
    """Delete the JetStream streams of ``namespace``: its streams (``NAMESPACE_*``) and its
    key-value buckets (``KV_namespace_*``, e.g. the token directory)."""
    import nats  # noqa: PLC0415  # only the scripts that start services need it

    prefixes = (namespace.upper() + "_", f"KV_{namespace}_")
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        for info in await js.streams_info():
            name = info.config.name or ""
            if name.startswith(prefixes):
                await js.delete_stream(name)
    finally:
        await client.close()


async def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the PostgreSQL server of ``server_url``; its URL."""
    import asyncpg  # noqa: PLC0415  # only the scripts that store need it

    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return f"{server_url.rpartition('/')[0]}/{name}"


async def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (if it is there), closing its connections."""
    import asyncpg  # noqa: PLC0415  # only the scripts that store need it

    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_disk_bytes(path: str) -> int:
    """Free bytes on the file system of ``path``, or of its closest readable parent (the
    PostgreSQL data directory is often not readable by the benchmark's user)."""
    candidate = Path(path)
    while True:
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            if candidate.parent == candidate:
                raise
            candidate = candidate.parent


def reference_loop_ms() -> float:
    """The best of 3 timings of a fixed Python loop (the sum of 10M integers), in ms.

    A virtual machine's speed drifts with its host's load (this project's 2-CPU machine ran
    the same loop 1.5x apart within an hour): printed beside a benchmark's figures, it says
    whether two runs of different hours can be compared at all.
    """
    timings = []
    for _ in range(3):
        started = time.perf_counter()
        sum(range(10_000_000))
        timings.append((time.perf_counter() - started) * 1000)
    return min(timings)


def machine_summary() -> str:
    """One line about the machine: host, CPU model and count, memory, and its speed now."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 1024 / 1024:.0f} GiB memory"
                break
    python = platform.python_version()
    speed = f"reference loop {reference_loop_ms():.0f} ms"
    return f"{platform.node()}, {os.cpu_count()} CPUs {model}{memory}, Python {python}, {speed}"


async def relation_sizes(conn: "asyncpg.Connection", schema: str, prefix: str) -> dict[str, int]:
    """Bytes on disk of each table of ``schema`` whose name starts with ``prefix``: its own
    pages, TOAST and indexes (``pg_total_relation_size``), summed over all its partitions
    (a partitioned table's parent holds nothing itself). Partitions are counted under the
    top table only."""
    rows = await conn.fetch(
        "SELECT c.relname AS name,"
        " CASE WHEN c.relkind = 'p' THEN (SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)"
        "  FROM pg_partition_tree(c.oid) t) ELSE pg_total_relation_size(c.oid) END::bigint AS bytes"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm') AND NOT c.relispartition"
        " AND starts_with(c.relname, $2)",
        schema,
        prefix,
    )
    return {row["name"]: row["bytes"] for row in rows}


def post_bodies(
    url: str,
    build: Callable[[], list[bytes]],
    content_type: str,
    token: str,
    ready: "multiprocessing.synchronize.Event",
    go: "multiprocessing.synchronize.Event",
) -> None:
    """One ingest client (a process): build its request bodies, say it is ready, wait for the
    start, then post them in order (a refused one fails the process)."""
    bodies = build()
    with httpx.Client(timeout=120.0, headers={"Authorization": f"Bearer {token}"}) as http:
        ready.set()
        go.wait()
        for body in bodies:
            response = http.post(url, content=body, headers={"Content-Type": content_type})
            response.raise_for_status()


async def start_clients(
    url: str, builds: Sequence[Callable[[], list[bytes]]], content_type: str, token: str
) -> tuple[list["multiprocessing.process.BaseProcess"], "multiprocessing.synchronize.Event"]:
    """One client process per body builder (picklable: a module-level function or a partial
    of one), returned once every one has built its bodies: the clock starts at ``go.set()``."""
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    ready = [ctx.Event() for _ in builds]
    procs: list[multiprocessing.process.BaseProcess] = [
        ctx.Process(target=post_bodies, args=(url, build, content_type, token, flag, go))
        for build, flag in zip(builds, ready, strict=True)
    ]
    for proc in procs:
        proc.start()
    while not all(flag.is_set() for flag in ready):
        if any(proc.exitcode for proc in procs):
            raise RuntimeError("an ingest client failed")
        await asyncio.sleep(0.05)
    return procs, go


async def committed_points(db: "asyncpg.Connection | asyncpg.Pool", schema: str) -> int:
    """Points the registry has committed (its ledger of stored messages)."""
    count: int = await db.fetchval(
        f"SELECT coalesce(sum(point_count), 0)::bigint FROM {schema}.metric_messages"  # noqa: S608  # the benchmark's own schema
    )
    return count

"""What shipping a program's output costs ``mldiag run``'s supervisor, per 100,000 lines.

Prints figures; asserts nothing (benchmarks are not tests). Run::

    .venv/bin/python benchmarks/log_shipping.py [--lines 100000] [--repeat 3]

Starts the run-registry and ingestion as processes (the machine's NATS,
``MLDIAG_BENCH_NATS_URL``, in a fresh namespace; PostgreSQL, ``MLDIAG_BENCH_DATABASE_URL``,
in a fresh database), then runs ``mldiag run -- python -c <program>`` in this process, the
program printing ``--lines`` lines of about 80 characters (unbuffered, as ``mldiag run``
starts it), twice per repetition: with ``--no-logs`` and with shipping. The supervisor's
CPU time is this process's (``RUSAGE_SELF``: its pumps, its SDK threads, the shipper; the
program is a child and not counted), from the start of the command to its return (the
lines flushed and the run ended). Prints the median of each, the difference per 100,000
lines, and lines the shipper reported lost (none expected).
"""

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psutil  # type: ignore[import-untyped,unused-ignore]  # no stubs
import structlog
from _support import (
    create_database,
    drop_database,
    drop_streams,
    emit,
    free_port,
    process,
    wait_http,
)

from mldiag.cli import main as mldiag_main

NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PYTHON = sys.executable
PROGRAM = """
import sys
for step in range({lines}):
    loss = 1 / (step + 1)
    print(f"step {{step:>7}} loss {{loss:.6f}} lr 3.0e-04 tokens/s 181234.5 grad_norm 0.8731")
"""


class LostLines(logging.Handler):
    """Counts the shipper's warnings that lines were dropped or lost."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the message of a ``mldiag.logs.*`` warning."""
        message = record.getMessage()
        if message.startswith("mldiag.logs."):
            self.warnings.append(message)


@contextlib.contextmanager
def output_discarded() -> Iterator[None]:
    """The supervisor copies the program's output to our stdout: to /dev/null here."""
    saved = sys.stdout
    with open(os.devnull, "w") as devnull:  # a text stream with a buffer
        sys.stdout = devnull
        try:
            yield
        finally:
            sys.stdout = saved


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def supervised(lines: int, ship: bool, ingestion_pid: int) -> tuple[float, float, float]:
    """CPU seconds of this process, wall seconds of one ``mldiag run``, and CPU seconds
    ingestion spent meanwhile."""
    args = ["run", "-q", "--interval", "0"] + ([] if ship else ["--no-logs"])
    program = [PYTHON, "-c", PROGRAM.format(lines=lines)]
    before = resource.getrusage(resource.RUSAGE_SELF)
    ingestion_before = _cpu(ingestion_pid)
    started = time.perf_counter()
    with output_discarded():
        status = mldiag_main([*args, "--", *program])
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    ingestion = _cpu(ingestion_pid) - ingestion_before
    if status != 0:
        raise RuntimeError(f"mldiag run exited with {status}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, ingestion


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="mldiag-bench-logs-"))
    database = asyncio.run(create_database(SERVER, f"mldiag_bench_logs_{tag}"))
    api_port, ingest_port = free_port(), free_port()
    token = "mldiag_" + secrets.token_urlsafe(32)
    env = {
        "MLDIAG_NATS_URL": NATS,
        "MLDIAG_NATS_NAMESPACE": f"benchlogs{tag}",
        "MLDIAG_DATABASE_URL": database,
        "MLDIAG_RUN_REGISTRY_PORT": str(api_port),
        "MLDIAG_INGESTION_PORT": str(ingest_port),
        "MLDIAG_INGESTION_OTLP_ENABLED": "false",
        "MLDIAG_LOG_LEVEL": "WARNING",
        "MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN": token,
    }
    api, ingestion = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ingest_port}"
    os.environ.update(
        MLDIAG_API_URL=api,
        MLDIAG_INGESTION_URL=ingestion,
        MLDIAG_TOKEN=token,
        MLDIAG_SPOOL_DIR=str(tmp / "spool"),
        MLDIAG_HOME=str(tmp / "home"),
    )
    lost = LostLines()
    logging.getLogger("mldiag").addHandler(lost)
    emit(
        f"# mldiag log shipping {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {os.cpu_count()} CPUs,"
        f" NATS {NATS}"
    )
    emit(
        f"# command: .venv/bin/python benchmarks/log_shipping.py --lines {args.lines}"
        f" --repeat {args.repeat}"
    )
    try:
        with (
            process([PYTHON, "-m", "mldiag_run_registry"], env, tmp / "registry.log"),
            process([PYTHON, "-m", "mldiag_ingestion"], env, tmp / "ingestion.log") as ingester,
        ):
            wait_http(f"{api}/healthz")
            wait_http(f"{ingestion}/healthz")
            supervised(1000, True, ingester.pid)  # warm: imports, connections, the first run
            samples: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
            for _ in range(args.repeat):
                for ship in (False, True):
                    samples[ship].append(supervised(args.lines, ship, ingester.pid))
    finally:
        asyncio.run(drop_streams(NATS, f"benchlogs{tag}"))
        asyncio.run(drop_database(SERVER, f"mldiag_bench_logs_{tag}"))
        shutil.rmtree(tmp, ignore_errors=True)
    per = 100_000 / args.lines
    cpu = {ship: statistics.median(s[0] for s in runs) for ship, runs in samples.items()}
    wall = {ship: statistics.median(s[1] for s in runs) for ship, runs in samples.items()}
    served = {ship: statistics.median(s[2] for s in runs) for ship, runs in samples.items()}
    emit(
        f"{'per 100,000 lines':<32} {'supervisor CPU s':>17} {'wall s':>8} {'ingestion CPU s':>16}"
    )
    for ship, name in ((False, "  without shipping (--no-logs)"), (True, "  with shipping")):
        emit(
            f"{name:<32} {cpu[ship] * per:>17.3f} {wall[ship] * per:>8.3f}"
            f" {served[ship] * per:>16.3f}"
        )
    emit(
        f"{'  shipping costs':<32} {(cpu[True] - cpu[False]) * per:>17.3f}"
        f" {(wall[True] - wall[False]) * per:>8.3f} {(served[True] - served[False]) * per:>16.3f}"
    )
    emit(f"supervisor: {(cpu[True] - cpu[False]) * per * 10:.1f} µs CPU a line shipped")
    emit(f"lines reported dropped or lost: {len(lost.warnings)} warnings {lost.warnings[:3]}")


if __name__ == "__main__":
    main()

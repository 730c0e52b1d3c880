"""Bus message cost: v1 (one object per point) vs v2 (columnar) MetricPointsReceived.

Run: ``.venv/bin/python benchmarks/bus_message.py``. Prints serialise and parse times for a
full message (MAX_POINTS_PER_MESSAGE points) and its size on the wire.
"""

import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic import TypeAdapter

from mldiag_schemas.messages import parse_message
from mldiag_schemas.telemetry import (
    MAX_POINTS_PER_MESSAGE,
    MetricColumns,
    MetricPoint,
    MetricPointsReceived,
    to_unix_micros,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REPEAT = 30


def _v1_bytes(points: int) -> bytes:
    # What ingestion published before v2: one JSON object per point, ISO timestamps.
    body = {
        "eventId": str(uuid.uuid4()),
        "type": "telemetry.metrics.received",
        "schemaVersion": 1,
        "occurredAt": NOW.isoformat(),
        "runId": "bench-run",
        "batchId": str(uuid.uuid4()),
        "chunk": 0,
        "points": [
            {
                "name": f"m{i % 10}",
                "step": i,
                "value": i * 0.5,
                "time": (NOW + timedelta(milliseconds=i)).isoformat(),
                "host": "host-0",
            }
            for i in range(points)
        ],
    }
    return json.dumps(body).encode()


def _v2_message(points: int) -> MetricPointsReceived:
    per = points // 10
    return MetricPointsReceived(
        run_id="bench-run",
        batch_id=uuid.uuid4(),
        chunk=0,
        series=[
            MetricColumns(
                name=f"m{m}",
                host="host-0",
                steps=list(range(per)),
                values=[i * 0.5 for i in range(per)],
                times_unix_us=[to_unix_micros(NOW) + i * 1000 for i in range(per)],
            )
            for m in range(10)
        ],
    )


def _median_ms(func: Callable[[], object]) -> float:
    samples = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        func()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")


def main() -> None:
    """Print the table."""
    n = MAX_POINTS_PER_MESSAGE
    v1 = _v1_bytes(n)
    v2 = _v2_message(n)
    v2_bytes = v2.model_dump_json().encode()
    _emit(f"# bus message cost, {n} points per message, median of {REPEAT}")
    _emit("# command: .venv/bin/python benchmarks/bus_message.py")
    _emit(f"{'shape':<28}{'bytes':>10}{'parse ms':>10}{'serialise ms':>14}")
    adapter = TypeAdapter(list[MetricPoint])
    old = _median_ms(lambda: adapter.validate_python(json.loads(v1)["points"]))
    _emit(f"{'v1 points (old path)':<28}{len(v1):>10}{old:>10.2f}{'':>14}")
    parse_v1 = _median_ms(lambda: parse_message(v1))
    _emit(f"{'v1 points (upcast)':<28}{len(v1):>10}{parse_v1:>10.2f}{'':>14}")
    parse_v2 = _median_ms(lambda: parse_message(v2_bytes))
    ser_v2 = _median_ms(v2.model_dump_json)
    _emit(f"{'v2 columnar':<28}{len(v2_bytes):>10}{parse_v2:>10.2f}{ser_v2:>14.2f}")
    _emit(f"parse speed-up v2/v1: {old / parse_v2:.1f}x; size ratio {len(v1) / len(v2_bytes):.1f}x")


if __name__ == "__main__":
    main()

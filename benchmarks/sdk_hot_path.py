"""What ``run.log`` costs the training thread, with the platform up and while it is down.

Prints figures; asserts nothing (benchmarks are not tests). Run::

    .venv/bin/python benchmarks/sdk_hot_path.py [--calls 200000] [--outage 30] [--rate 1000]

1. Platform up: ``--calls`` back-to-back ``run.log`` calls of 10 metrics; median, p99 and
   max caller-thread time of one call (goal: median ≤ 5 µs).
   A "raw floor" (a dict copy and a deque append, the least any Python ``log`` can do) is
   measured the same way, side by side.
2. Platform down for ``--outage`` seconds (a closed port), logging at ``--rate`` calls per
   second: the longest any call blocked (goal ≤ 1 ms), then the server comes back on that
   port and every point must arrive (the server counts what it stores, deduped by batch).
"""

import argparse
import collections
import gzip
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import mldiag

METRICS = [f"metric_{index}" for index in range(10)]


class CountingServer:
    """Answers every request 2xx; counts metric points once per batch id."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.points = 0
        self.batches: set[str] = set()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        """Listen on the port in a thread."""
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _answer(self, status: int) -> None:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_POST(self) -> None:
                """Runs are created; batches counted."""
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path.endswith("metrics:write"):
                    body = json.loads(gzip.decompress(raw))
                    with counter._lock:
                        if body["batchId"] not in counter.batches:
                            counter.batches.add(body["batchId"])
                            counter.points += sum(len(s["steps"]) for s in body["series"])
                    self._answer(202)
                else:
                    self._answer(201)

            def do_GET(self) -> None:
                """The run, for the phase update's etag."""
                self._answer(200)

            def do_PATCH(self) -> None:
                """Phase updates."""
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self._answer(200)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def emit(line: str) -> None:
    """Print one line of figures."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def free_port() -> int:
    """A port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(sorted_ns: list[int], fraction: float) -> float:
    """The value at ``fraction`` of a sorted list, in microseconds."""
    return sorted_ns[min(int(len(sorted_ns) * fraction), len(sorted_ns) - 1)] / 1000


def start_run(url: str, spool: str) -> mldiag.Run:
    """A run pointed at ``url`` for both APIs."""
    return mldiag.init(
        name="bench",
        api_url=url,
        ingestion_url=url,
        spool_dir=spool,
        handle_exit=False,
        shutdown_timeout=60,
        # only the benchmark's own points are counted; heartbeats stay on (no points)
        log_system_metrics=False,
    )


def bench_up(calls: int) -> None:
    """Back-to-back calls with the platform up."""
    server = CountingServer(free_port())
    server.start()
    with tempfile.TemporaryDirectory() as spool:
        run = start_run(f"http://127.0.0.1:{server.port}", spool)
        values = dict.fromkeys(METRICS, 0.5)
        timings = [0] * calls
        clock = time.perf_counter_ns
        began = time.perf_counter()
        for index in range(calls):
            start = clock()
            run.log(values)
            timings[index] = clock() - start
        elapsed = time.perf_counter() - began
        run.finish()
        server.stop()
    timings.sort()
    emit(f"platform up: {calls} calls x 10 metrics in {elapsed:.2f} s")
    emit(
        f"  run.log caller cost: median {statistics.median(timings) / 1000:.2f} us, "
        f"p99 {percentile(timings, 0.99):.2f} us, p99.9 {percentile(timings, 0.999):.2f} us, "
        f"max {timings[-1] / 1000:.1f} us"
    )
    emit(f"  points stored: {server.points} of {calls * 10}")


def bench_floor(calls: int, rate: float) -> None:
    """The raw limit: the least a Python call can do (copy the dict, append to a deque)."""
    buffer: collections.deque[tuple[float, dict[str, float]]] = collections.deque()
    values = dict.fromkeys(METRICS, 0.5)

    def floor(metrics: dict[str, float]) -> None:
        buffer.append((time.time(), dict(metrics)))

    clock = time.perf_counter_ns
    for label, pause in (("back-to-back", 0.0), (f"paced at {rate:.0f}/s", 1.0 / rate)):
        timings = []
        for _ in range(min(calls, 20_000) if pause else calls):
            start = clock()
            floor(values)
            timings.append(clock() - start)
            if pause:
                time.sleep(pause)
        timings.sort()
        emit(
            f"raw floor ({label}): median {statistics.median(timings) / 1000:.2f} us, "
            f"p99 {percentile(timings, 0.99):.2f} us, max {timings[-1] / 1000:.1f} us, "
            f"calls over 1 ms: {sum(t > 1_000_000 for t in timings)}"
        )


def bench_outage(seconds: float, rate: float) -> None:
    """Paced calls while the platform is down, then recovery."""
    port = free_port()
    server = CountingServer(port)
    with tempfile.TemporaryDirectory() as spool:
        run = start_run(f"http://127.0.0.1:{port}", spool)
        values = dict.fromkeys(METRICS, 0.5)
        interval = 1.0 / rate
        worst = 0
        timings: list[int] = []
        clock = time.perf_counter_ns
        began = time.monotonic()
        calls = 0
        next_call = began
        while time.monotonic() - began < seconds:
            start = clock()
            run.log(values)
            spent = clock() - start
            timings.append(spent)
            worst = max(worst, spent)
            calls += 1
            next_call += interval
            pause = next_call - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        spooled = run._pipeline._queue.pending_bytes()
        server.start()
        back = time.monotonic()
        flushed = run.flush(timeout=120)
        recovered = time.monotonic() - back
        run.finish()
        server.stop()
    timings.sort()
    emit(f"platform down {seconds:.0f} s at {rate:.0f} calls/s ({calls} calls x 10 metrics):")
    emit(
        f"  run.log caller cost: median {statistics.median(timings) / 1000:.2f} us, "
        f"p99 {percentile(timings, 0.99):.2f} us, p99.9 {percentile(timings, 0.999):.2f} us, "
        f"max {worst / 1000:.1f} us, calls over 1 ms: {sum(t > 1_000_000 for t in timings)}"
    )
    emit(f"  spooled on disk at the end of the outage: {spooled / 1e6:.1f} MB")
    emit(
        f"  after recovery: flushed={flushed} in {recovered:.1f} s, "
        f"points stored {server.points} of {calls * 10} "
        f"({'none lost' if server.points == calls * 10 else 'LOST POINTS'})"
    )


def main() -> None:
    """Both benchmarks."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--outage", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()
    bench_floor(args.calls, args.rate)
    bench_up(args.calls)
    bench_outage(args.outage, args.rate)


if __name__ == "__main__":
    main()

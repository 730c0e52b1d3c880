"""What ``run.log`` costs the training thread: alone, among 64 threads, in 8 processes, and
while the platform is down.

Prints figures; asserts nothing (benchmarks are not tests). Run::

    .venv/bin/python benchmarks/sdk_hot_path.py [--calls 200000] [--threads 64]
        [--thread-calls 2000] [--processes 8] [--process-calls 20000] [--outage 30] [--rate 1000]

Every ``run.log`` call logs 10 metrics and is timed alone (``perf_counter_ns`` before and
after, stored in a preallocated list), so the figures are the caller thread's cost of one call.
Each scenario is printed next to its "raw floor" (a dict copy and a deque append, the least
any Python ``log`` can do) measured the same way under the same concurrency.

1. One thread, platform up: ``--calls`` back-to-back calls (goal: median ≤ 3 µs).
2. One process, ``--threads`` threads (a training loop's data-loader and worker threads, each
   logging its own metrics at its own steps, labelled ``thread=tNN``) released together,
   ``--thread-calls`` calls each: median, p99 and max over every call of every thread, and the
   spread of the per-thread medians (goal: median ≤ 3 µs).
3. ``--processes`` processes on this host (one writer per process index, one shared spool
   root), each logging ``--process-calls`` calls from one thread: each process's median, and
   the median over all calls (goal ≤ 3 µs).
4. Platform down for ``--outage`` seconds (a closed port; 0 skips it), logging at ``--rate``
   calls per second: the longest any call blocked (goal ≤ 1 ms), then the server comes back
   on that port and every point must arrive.

After each scenario every point must have reached the counting server, which runs in a
process of its own (so that it competes with nobody's GIL), answers every request 2xx and
counts points once per batch id, whether a body is gzipped JSON or a columnar frame
(``application/x-mldiag-columns``: ``MLDC``, a version byte, a u32 LE header length, a JSON
header whose series carry their ``count``): expected and received are printed side by side.
"""

import argparse
import collections
import gzip
import json
import multiprocessing
import os
import platform
import re
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.synchronize import Barrier, Event
from typing import Any

import httpx
from _support import machine_summary

import mldiag
from mldiag.pipeline import Pipeline

METRICS = [f"metric_{index}" for index in range(10)]
FRAME_MAGIC = b"MLDC"
_FRAME_PREFIX = struct.Struct("<4sBI")  # magic, version, header length


_JSON_BATCH_ID = re.compile(rb'"batchId":"([^"]+)"')
_JSON_STEPS = re.compile(rb'"steps":\[([^\]]*)\]')


def count_batch(body: bytes, content_encoding: str) -> tuple[str, int]:
    """The batch id and the number of points of one ``metrics:write`` body.

    Only what counting needs, so that the server is never the bottleneck: a frame's JSON
    header (its series' ``count``), never its columns; in a JSON body, the commas of each
    ``steps`` list (integers only), found by a regular expression rather than by parsing
    every value (a tenth of ``json.loads``' cost).
    """
    if content_encoding == "gzip":
        body = gzip.decompress(body)
    if body[:4] == FRAME_MAGIC:
        _, _, length = _FRAME_PREFIX.unpack_from(body)
        header = json.loads(body[_FRAME_PREFIX.size : _FRAME_PREFIX.size + length])
        points = sum(int(series["count"]) for series in header["series"])
        # A frame's header may leave the id out (the bus's do); count it then, undeduped.
        return str(header.get("batchId") or uuid.uuid4()), points
    found = _JSON_BATCH_ID.search(body)
    if found is None:
        return str(uuid.uuid4()), sum(len(s["steps"]) for s in json.loads(body)["series"])
    steps = _JSON_STEPS.findall(body)
    return found.group(1).decode(), sum(column.count(b",") + 1 for column in steps if column)


def _serve_counts(port: int, ready: Event) -> None:
    """The counting server's process: every batch counted once, ``GET /count`` the totals."""
    lock = threading.Lock()
    batches: set[str] = set()
    totals = {"points": 0, "batches": 0, "duplicates": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per sender, no handshakes
        # The headers and the body leave in two writes: with Nagle's algorithm the body waits
        # for the client's delayed ACK, 40 ms per request on a kept-alive connection.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

        def _answer(self, status: int, body: bytes = b"{}") -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _read(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", "0")))

        def do_POST(self) -> None:
            """Runs are created; batches counted."""
            raw = self._read()
            if not self.path.endswith("metrics:write"):
                self._answer(201 if self.path.endswith("machineLearningRuns") else 200)
                return
            batch_id, points = count_batch(raw, self.headers.get("Content-Encoding", ""))
            with lock:
                if batch_id in batches:
                    totals["duplicates"] += 1
                else:
                    batches.add(batch_id)
                    totals["points"] += points
                    totals["batches"] += 1
            self._answer(202)

        def do_GET(self) -> None:
            """The totals on ``/count``; anything else is the run (for the phase's etag)."""
            if self.path == "/count":
                with lock:
                    self._answer(200, json.dumps(totals).encode())
            else:
                self._answer(200)

        def do_PATCH(self) -> None:
            """Phase updates."""
            self._read()
            self._answer(200)

    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    ready.set()
    server.serve_forever()


class CountingServer:
    """The counting server, in a process of its own on ``port``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._process: multiprocessing.process.BaseProcess | None = None

    def start(self) -> None:
        """Start listening (returns once the port is open)."""
        context = multiprocessing.get_context("spawn")
        ready = context.Event()
        self._process = context.Process(
            target=_serve_counts, args=(self.port, ready), name="counting-server", daemon=True
        )
        self._process.start()
        if not ready.wait(30):
            raise RuntimeError("the counting server did not start")

    def totals(self) -> dict[str, int]:
        """Points and batches counted so far (distinct batch ids), and duplicates seen."""
        counts: dict[str, int] = httpx.get(f"{self.url}/count", timeout=10).json()
        return counts

    def stop(self) -> None:
        """Stop listening."""
        if self._process is not None:
            self._process.terminate()
            self._process.join(10)
            self._process = None


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


def percentile(sorted_ns: Sequence[int], fraction: float) -> float:
    """The value at ``fraction`` of a sorted sequence, in microseconds."""
    return sorted_ns[min(int(len(sorted_ns) * fraction), len(sorted_ns) - 1)] / 1000


def summary(timings: list[int]) -> str:
    """Median, p99, p99.9 and max of call times in ns (sorted in place), in µs."""
    timings.sort()
    return (
        f"median {statistics.median(timings) / 1000:.2f} us, "
        f"p99 {percentile(timings, 0.99):.2f} us, p99.9 {percentile(timings, 0.999):.2f} us, "
        f"max {timings[-1] / 1000:.1f} us, mean {statistics.fmean(timings) / 1000:.2f} us"
    )


def arrival(expected: int, received: dict[str, int]) -> str:
    """Expected points against the distinct points the server counted."""
    verdict = "none lost" if received["points"] == expected else "LOST OR EXTRA POINTS"
    return (
        f"points expected {expected}, received {received['points']} ({verdict}; "
        f"{received['batches']} batches, {received['duplicates']} duplicate sends)"
    )


def start_run(url: str, spool: str, **kwargs: Any) -> mldiag.Run:
    """A run pointed at ``url`` for both APIs."""
    return mldiag.init(
        name="bench",
        api_url=url,
        ingestion_url=url,
        spool_dir=spool,
        handle_exit=False,
        shutdown_timeout=120,
        # only the benchmark's own points are counted; heartbeats stay on (no points)
        log_system_metrics=False,
        **kwargs,
    )


def pipeline_of(run: mldiag.Run) -> Pipeline:
    """The online pipeline of ``run`` (the SDK's own benchmark looks inside)."""
    pipeline = run._pipeline
    assert isinstance(pipeline, Pipeline)  # noqa: S101  # an online run
    return pipeline


class Floor:
    """The raw floor: the least a Python ``log`` can do (stamp, copy the dict, append)."""

    def __init__(self) -> None:
        self.buffer: collections.deque[tuple[int, float, dict[str, Any], Any]] = collections.deque()

    def log(self, metrics: dict[str, Any], step: int, labels: Any = None) -> None:
        """One buffered call."""
        self.buffer.append((step, time.time(), dict(metrics), labels))


def timed_calls(
    log: Callable[..., None], calls: int, labels: dict[str, str] | None = None
) -> list[int]:
    """``calls`` calls of ``log`` with 10 metrics at steps 0, 1, …, each timed alone (ns)."""
    values = dict.fromkeys(METRICS, 0.5)
    timings = [0] * calls
    clock = time.perf_counter_ns
    if labels is None:
        for step in range(calls):
            start = clock()
            log(values, step)
            timings[step] = clock() - start
    else:
        for step in range(calls):
            start = clock()
            log(values, step, labels=labels)
            timings[step] = clock() - start
    return timings


def bench_floor(calls: int, rate: float) -> None:
    """The raw limit of one thread, back to back and paced."""
    emit(f"raw floor, 1 thread, back to back: {summary(timed_calls(Floor().log, calls))}")
    floor = Floor()
    values = dict.fromkeys(METRICS, 0.5)
    clock = time.perf_counter_ns
    timings = []
    for step in range(min(calls, 20_000)):
        start = clock()
        floor.log(values, step)
        timings.append(clock() - start)
        time.sleep(1.0 / rate)
    over = sum(t > 1_000_000 for t in timings)
    emit(f"raw floor, 1 thread, paced at {rate:.0f}/s: {summary(timings)}, calls over 1 ms: {over}")


def bench_up(calls: int) -> None:
    """One thread, back to back, platform up."""
    server = CountingServer(free_port())
    server.start()
    try:
        with tempfile.TemporaryDirectory() as spool:
            run = start_run(server.url, spool)
            began = time.perf_counter()
            timings = timed_calls(run.log, calls)
            elapsed = time.perf_counter() - began
            run.finish()
        emit(f"run.log, 1 thread: {calls} calls x 10 metrics in {elapsed:.2f} s")
        emit(f"  caller cost: {summary(timings)}")
        emit(f"  {arrival(calls * 10, server.totals())}")
    finally:
        server.stop()


def threaded_calls(
    log: Callable[..., None], threads: int, calls: int
) -> tuple[list[list[int]], float]:
    """``threads`` threads released together, each timing ``calls`` calls of its own
    (labelled ``thread=tNN``); their timings and the wall time until the last one ended."""
    results: list[list[int]] = [[] for _ in range(threads)]
    gate = threading.Barrier(threads + 1)

    def work(index: int) -> None:
        labels = {"thread": f"t{index:02d}"}
        gate.wait()
        results[index] = timed_calls(log, calls, labels)

    workers = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    gate.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    return results, time.perf_counter() - began


def spread(per_thread: list[list[int]], unit: str = "thread") -> str:
    """The lowest and highest of the per-thread (or per-process) medians, in µs."""
    medians = sorted(statistics.median(timings) / 1000 for timings in per_thread)
    return f"per-{unit} medians {medians[0]:.2f}..{medians[-1]:.2f} us"


def bench_threads(threads: int, calls: int) -> None:
    """One process, ``threads`` threads logging at once."""
    floor_timings, floor_wall = threaded_calls(Floor().log, threads, calls)
    emit(
        f"raw floor, {threads} threads x {calls} calls: "
        f"{summary([t for thread in floor_timings for t in thread])} "
        f"({spread(floor_timings)}; {threads * calls / floor_wall:,.0f} calls/s)"
    )
    server = CountingServer(free_port())
    server.start()
    try:
        with tempfile.TemporaryDirectory() as spool:
            run = start_run(server.url, spool)
            per_thread, wall = threaded_calls(run.log, threads, calls)
            spilled = pipeline_of(run).spilled
            began = time.perf_counter()
            run.finish()
            finished = time.perf_counter() - began
        emit(
            f"run.log, {threads} threads x {calls} calls x 10 metrics in {wall:.2f} s "
            f"({threads * calls / wall:,.0f} calls/s; {spilled} batches spilled by callers; "
            f"finish {finished:.2f} s)"
        )
        emit(f"  caller cost: {summary([t for thread in per_thread for t in thread])}")
        emit(f"  {spread(per_thread)}")
        emit(f"  {arrival(threads * calls * 10, server.totals())}")
    finally:
        server.stop()


def _log_in_process(
    index: int, url: str, spool: str, run_id: str, calls: int, gate: Barrier, out: Any
) -> None:
    """One of the processes: its raw floor, then its ``run.log`` calls, timings sent back."""
    floor = timed_calls(Floor().log, min(calls, 20_000))
    run = start_run(url, spool, run_id=run_id, process_index=index)
    gate.wait()
    began = time.perf_counter()
    timings = timed_calls(run.log, calls)
    elapsed = time.perf_counter() - began
    sent = run.finish()
    out.put((index, floor, timings, elapsed, sent))


def bench_processes(processes: int, calls: int) -> None:
    """``processes`` processes of one run on this host, each logging from one thread."""
    server = CountingServer(free_port())
    server.start()
    context = multiprocessing.get_context("spawn")
    gate = context.Barrier(processes)
    out = context.Queue()
    run_id = str(uuid.uuid4())
    try:
        with tempfile.TemporaryDirectory() as spool:
            children = [
                context.Process(
                    target=_log_in_process,
                    args=(index, server.url, spool, run_id, calls, gate, out),
                )
                for index in range(processes)
            ]
            for child in children:
                child.start()
            results = sorted(out.get(timeout=600) for _ in children)
            for child in children:
                child.join(60)
            left = sorted(os.path.relpath(path, spool) for path, _, _ in os.walk(spool))
        floors = [floor for _, floor, _, _, _ in results]
        timings = [calls_ns for _, _, calls_ns, _, _ in results]
        emit(
            f"raw floor, {processes} processes x {len(floors[0])} calls: "
            f"{summary([t for floor in floors for t in floor])} ({spread(floors, 'process')})"
        )
        emit(f"run.log, {processes} processes x {calls} calls x 10 metrics, one spool root:")
        for index, _, calls_ns, elapsed, sent in results:
            emit(
                f"  process {index}: median {statistics.median(calls_ns) / 1000:.2f} us, "
                f"p99 {percentile(sorted(calls_ns), 0.99):.2f} us in {elapsed:.2f} s, "
                f"finish sent all: {sent}"
            )
        emit(f"  caller cost, all processes: {summary([t for ns in timings for t in ns])}")
        emit(f"  {arrival(processes * calls * 10, server.totals())}")
        emit(f"  left in the spool root: {[path for path in left if path != '.'] or 'nothing'}")
    finally:
        server.stop()


def bench_outage(seconds: float, rate: float) -> None:
    """Paced calls while the platform is down, then recovery."""
    port = free_port()
    server = CountingServer(port)
    with tempfile.TemporaryDirectory() as spool:
        run = start_run(f"http://127.0.0.1:{port}", spool)
        values = dict.fromkeys(METRICS, 0.5)
        interval = 1.0 / rate
        timings: list[int] = []
        clock = time.perf_counter_ns
        began = time.monotonic()
        calls = 0
        next_call = began
        while time.monotonic() - began < seconds:
            start = clock()
            run.log(values)
            timings.append(clock() - start)
            calls += 1
            next_call += interval
            pause = next_call - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        spooled = pipeline_of(run)._queue.pending_bytes()  # the SDK's own benchmark
        server.start()
        try:
            back = time.monotonic()
            flushed = run.flush(timeout=120)
            recovered = time.monotonic() - back
            run.finish()
            received = server.totals()
        finally:
            server.stop()
    over = sum(t > 1_000_000 for t in timings)
    emit(f"platform down {seconds:.0f} s at {rate:.0f} calls/s ({calls} calls x 10 metrics):")
    emit(f"  caller cost: {summary(timings)}, calls over 1 ms: {over}")
    emit(f"  spooled on disk at the end of the outage: {spooled / 1e6:.1f} MB")
    emit(
        f"  after recovery: flushed={flushed} in {recovered:.1f} s, {arrival(calls * 10, received)}"
    )


def main() -> None:
    """Every scenario, in one run."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--thread-calls", type=int, default=2_000)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--process-calls", type=int, default=20_000)
    parser.add_argument("--outage", type=float, default=30.0, help="seconds; 0 skips it")
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()
    emit(
        f"{' '.join(sys.argv)} | Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"{platform.machine()}, switch interval {sys.getswitchinterval() * 1000:.0f} ms"
    )
    emit(f"# machine: {machine_summary()}")
    bench_floor(args.calls, args.rate)
    bench_up(args.calls)
    if args.threads:
        bench_threads(args.threads, args.thread_calls)
    if args.processes:
        bench_processes(args.processes, args.process_calls)
    if args.outage:
        bench_outage(args.outage, args.rate)


if __name__ == "__main__":
    main()

"""The SDK under load: many threads and many processes logging at once lose nothing.

Against the fake platform (a real HTTP server on 127.0.0.1), which stores each batch id once:
every point logged must be there exactly once, whichever thread or process logged it and
whichever of the collector, a spilling caller or ``finish`` encoded it.
"""

import collections
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import mldiag
from mldiag.config import Settings
from mldiag.pipeline import Pipeline
from mldiag.spool import MemoryQueue, Spool, SpoolError
from mldiag.transport import Outcome, Result
from sdk.fake_platform import FakePlatform

THREADS = 64
METRICS = ("loss", "grad_norm", "lr", "wait")


def start(platform_url: str, spool: Path, **kwargs: Any) -> mldiag.Run:
    options: dict[str, Any] = {
        "name": "load",
        "api_url": platform_url,
        "ingestion_url": platform_url,
        "spool_dir": spool,
        "handle_exit": False,
        "flush_interval": 0.05,
        "shutdown_timeout": 30.0,
        "request_timeout": 5.0,
        "log_system_metrics": False,  # exact point counts below
    }
    options.update(kwargs)
    return mldiag.init(**options)


def stored(platform: FakePlatform) -> Iterator[tuple[tuple[str, ...], str, int, float]]:
    """(labels, name, step, value) of every point the platform stored, any encoding."""
    for batch in platform.received.batches:
        for series in batch["series"]:
            labels = tuple(sorted((series.get("labels") or {}).items()))
            key = (*(value for _, value in labels), str(series.get("processIndex", "")))
            for step, value in zip(series["steps"], series["values"], strict=True):
                yield key, series["name"], int(step), float(value)


def test_64_threads_logging_at_once_lose_nothing_and_duplicate_nothing(
    platform: FakePlatform, tmp_path: Path
) -> None:
    calls = 250
    # Small batches and a small bound: the collector, callers spilling over the bound and
    # callers waiting at twice the bound all encode, concurrently.
    run = start(platform.url, tmp_path, batch_points=1_000, max_buffered_points=4_000)
    gate = threading.Barrier(THREADS)

    def work(index: int) -> None:
        labels = {"thread": f"t{index:02d}"}
        gate.wait()
        for step in range(calls):
            run.log(dict.fromkeys(METRICS, index * 10_000 + step), step=step, labels=labels)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pipeline = run._pipeline
    assert isinstance(pipeline, Pipeline)
    assert pipeline.enqueued_points == THREADS * calls * len(METRICS)  # no increment lost
    assert run.finish() is True

    points = collections.Counter(stored(platform))
    assert sum(points.values()) == THREADS * calls * len(METRICS)
    assert set(points.values()) == {1}
    expected = {
        ((f"t{index:02d}", "0"), name, step, float(index * 10_000 + step))
        for index in range(THREADS)
        for name in METRICS
        for step in range(calls)
    }
    assert set(points) == expected
    assert pipeline.lost_batches == 0
    assert not list(tmp_path.glob("*/*/*.seg"))


def test_the_buffer_bound_holds_with_64_threads_and_a_collector_asleep(
    platform: FakePlatform, tmp_path: Path
) -> None:
    calls, bound = 200, 2_000
    run = start(
        platform.url, tmp_path, batch_points=500, max_buffered_points=bound, flush_interval=60
    )
    pipeline = run._pipeline
    assert isinstance(pipeline, Pipeline)
    wake = pipeline._wake_collector.set
    pipeline._wake_collector.set = lambda: None  # type: ignore[method-assign]  # callers spill
    largest = [0] * THREADS
    gate = threading.Barrier(THREADS)

    def work(index: int) -> None:
        gate.wait()
        for step in range(calls):
            run.log(dict.fromkeys(METRICS, 1.0), step=step, labels={"thread": str(index)})
            pending = pipeline.enqueued_points - pipeline._drained_points
            largest[index] = max(largest[index], pending)

    threads = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Twice the bound, plus what the other threads appended before this one checked it.
    assert max(largest) <= 2 * bound + THREADS * len(METRICS)
    assert pipeline.spilled > 0
    pipeline._wake_collector.set = wake  # type: ignore[method-assign]
    assert run.finish() is True
    assert sum(1 for _ in stored(platform)) == THREADS * calls * len(METRICS)


def test_threads_that_leave_the_step_out_each_take_a_step_of_their_own(
    platform: FakePlatform, tmp_path: Path
) -> None:
    threads, calls = 8, 1_000
    run = start(platform.url, tmp_path)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:

        def work(index: int) -> None:
            for _ in range(calls):
                run.log({"x": 1.0}, labels={"thread": str(index)})

        workers = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert run.step == threads * calls
    assert run.finish() is True
    steps = sorted(step for _, _, step, _ in stored(platform))
    assert steps == list(range(threads * calls))


_CHILD = textwrap.dedent(
    """
    import json, sys
    import mldiag

    url, spool, run_id, index, calls = sys.argv[1:6]
    run = mldiag.init(
        name="load", api_url=url, ingestion_url=url, spool_dir=spool, run_id=run_id,
        process_index=int(index), handle_exit=False, log_system_metrics=False,
        flush_interval=0.05, batch_points=500, shutdown_timeout=30,
    )
    sys.stdin.readline()  # every process is ready: log at once
    for step in range(int(calls)):
        run.log({"loss": float(step), "lr": float(index)}, step=step)
    print(json.dumps({"sent": run.finish()}), flush=True)
    """
)


def test_8_processes_of_one_run_on_one_spool_root_lose_nothing(
    platform: FakePlatform, tmp_path: Path
) -> None:
    processes, calls = 8, 500
    environment = {
        **{key: value for key, value in os.environ.items() if not key.startswith("MLDIAG_")},
        "MLDIAG_HEARTBEAT_INTERVAL": "0",
    }
    arguments = [platform.url, str(tmp_path), "shared-run"]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, *arguments, str(index), str(calls)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        for index in range(processes)
    ]
    answers: list[Mapping[str, Any]] = []
    try:
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=120)
            assert child.returncode == 0
            answers.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert answers == [{"sent": True}] * processes

    points = collections.Counter(stored(platform))
    assert sum(points.values()) == processes * calls * 2
    assert set(points.values()) == {1}
    assert {(key[-1], name, step) for key, name, step, _ in points} == {
        (str(index), name, step)
        for index in range(processes)
        for name in ("loss", "lr")
        for step in range(calls)
    }
    assert len(platform.received.creates) == 1  # process 0 alone creates the run
    assert not list(tmp_path.iterdir())  # every writer's directory removed once sent


class RefusingQueue(MemoryQueue):
    """A spool whose disk is full for its first ``refusals`` appends."""

    def __init__(self, refusals: int) -> None:
        super().__init__("full-disk-run")
        self.refusals = refusals

    def append(self, payload: bytes) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise OSError(28, "No space left on device")
        super().append(payload)


class StepsEncoder:
    """Bodies that are the JSON list of their entries' steps (the wire format is not the
    subject here, the order and the count are)."""

    def encode(self, entries: list[tuple[int, float, Mapping[str, Any], Any]]) -> Any:
        return Body(json.dumps([entry[0] for entry in entries]).encode())


class Body:
    def __init__(self, body: bytes) -> None:
        self.body = body


class Recorder:
    """A metrics writer that keeps every body it is given and says it was stored."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def write(self, run_id: str, body: bytes, timeout: float | None = None) -> Result:  # noqa: ARG002
        self.bodies.append(body)
        return Result(Outcome.SENT, 202)


def test_batches_the_spool_refuses_wait_in_memory_and_are_sent_in_order() -> None:
    queue = RefusingQueue(refusals=3)
    writer = Recorder()
    settings = Settings(batch_points=10, flush_interval=0.05)
    pipeline = Pipeline(settings, queue, writer, StepsEncoder())  # type: ignore[arg-type]
    pipeline.start()
    for step in range(100):
        pipeline.put(step, {"loss": float(step)}, None)
    assert pipeline.close(timeout=10) is True
    assert queue.refusals == 0
    assert pipeline.lost_batches == 0
    assert [step for body in writer.bodies for step in json.loads(body)] == list(range(100))
    # the bound's count is still exact: a refused batch left the buffer all the same
    assert pipeline.enqueued_points == pipeline._drained_points == 100


@pytest.mark.parametrize("waiting", [True, False])
def test_a_caller_over_the_bound_spills_only_while_it_still_is(
    tmp_path: Path, waiting: bool
) -> None:
    down = FakePlatform()  # never started: nothing is sent, batches stay spooled
    run = start(down.url, tmp_path, batch_points=10, max_buffered_points=50, flush_interval=60)
    pipeline = run._pipeline
    assert isinstance(pipeline, Pipeline)
    pipeline._wake_collector.set = lambda: None  # type: ignore[method-assign]  # collector asleep
    for step in range(45):
        run.log({"loss": float(step)})
    # Another thread drains the buffer while this caller waits for the lock (or does not).
    pipeline._drained_points = pipeline.enqueued_points
    pipeline._spill(2 * 50 + 1 if waiting else 51)
    assert pipeline.spilled == (0 if waiting else 1)
    run.finish(timeout=0.2)


def test_a_sender_that_outlives_close_releases_the_spool_when_it_exits(tmp_path: Path) -> None:
    directory = tmp_path / "run" / "host-p0"
    created = threading.Event()

    def slow_create(timeout: float) -> bool:
        created.wait(2)  # creating the run takes longer than close allows
        return True

    pipeline = Pipeline(
        Settings(flush_interval=0.05),
        Spool(directory, "run"),
        Recorder(),  # type: ignore[arg-type]
        StepsEncoder(),  # type: ignore[arg-type]
        before_send=slow_create,
    )
    pipeline.start()
    pipeline.put(0, {"loss": 1.0}, None)
    assert pipeline.close(timeout=0.1) is False
    with pytest.raises(SpoolError):  # the sender still reads it: the lock is still held
        Spool(directory, "run")
    created.set()
    pipeline._sender.join(5)
    assert not pipeline._sender.is_alive()
    again = Spool(directory, "run")  # released: a later process (or run) can replay it
    assert sum(1 for _ in again.records()) == 1
    again.close()

"""The offline pipeline under concurrency: many threads logging while the collector drains
lose no count (the buffer's counters decide when the collector wakes)."""

import sys
import threading
from pathlib import Path
from typing import Any

from mldiag.config import Settings
from mldiag.control import RunSpec
from mldiag.encoding import Encoder, points_in
from mldiag.offline import OfflinePipeline, OfflineRecord

THREADS = 64
CALLS = 300


class PythonLen(dict[str, Any]):
    """Metrics whose ``len`` runs Python code: a point where the interpreter may switch
    threads, as a user's Mapping or a proxy object would offer."""

    def __len__(self) -> int:
        return dict.__len__(self)


def test_64_threads_and_the_collector_never_lose_a_count(tmp_path: Path) -> None:
    settings = Settings(batch_points=50, flush_interval=60)
    record = OfflineRecord(
        tmp_path,
        RunSpec(run_id="offline-run", display_name="offline"),
        "host-p0",
        primary=True,
        create_run=True,
        project=None,
        location=None,
    )
    pipeline = OfflinePipeline(settings, record, Encoder("host", 0))  # no collector thread
    gate = threading.Barrier(THREADS + 1)
    done = threading.Event()

    def work(index: int) -> None:
        gate.wait()
        for step in range(CALLS):
            pipeline.put(step, PythonLen(a=1.0, b=2.0), {"thread": str(index)})

    def drain() -> None:  # the collector's side, as often as it can
        gate.wait()
        while not done.is_set():
            pipeline.collect()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        workers = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
        collector = threading.Thread(target=drain)
        collector.start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        done.set()
        collector.join()
    finally:
        sys.setswitchinterval(interval)
    total = THREADS * CALLS * 2
    assert pipeline.enqueued_points == total
    pipeline.collect()
    assert pipeline.enqueued_points - pipeline._drained_points == 0
    assert sum(points_in(spooled.payload) for spooled in record.spool.records()) == total
    pipeline.close(timeout=5)

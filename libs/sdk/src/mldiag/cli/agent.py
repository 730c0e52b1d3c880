"""``mldiag agent``: a host's metrics, attributed to the runs whose processes run there.

Every interval the agent finds the processes whose environment names a run
(``MLDIAG_RUN_ID``, which ``mldiag run`` and the SDK's users set), groups them by run, and
writes into each run that run's process metrics (CPU, memory, threads, processes summed
over its processes here), the host's CPU and memory, and the accelerators present (NVIDIA
GPUs, TPUs), all tagged with this host; and, every ``MLDIAG_CONTENTION_INTERVAL`` seconds
(default 1, 0: off), contention: the host's CPU by mode, load, swap, disks and network, the
run's own CPU and memory, and the top other processes while the host is busy. It never
creates a run nor changes its phase: each run gets an
:class:`~mldiag.attached.AttachedWriter` (the SDK's batching, spool and retries). It stops
cleanly on SIGTERM or SIGINT, sending what it holds.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from types import FrameType
from typing import Any

from mldiag.attached import AttachedWriter
from mldiag.cli.supervise import add_platform_options, seconds_argument
from mldiag.config import Settings, contention_interval, env_seconds
from mldiag.identity import host_name
from mldiag.process_tree import ProcessMeter, RunProcesses, host_only_source
from mldiag.system import ContentionMeter, Sample, Source, gpu_source, start_sources, tpu_source

logger = logging.getLogger("mldiag")

_ONCE_WAIT_SECONDS = 1.0
"""With ``--once``: between the first CPU reading and the sample (one reading is none)."""


def add_agent_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``agent`` to ``mldiag``'s subcommands."""
    parser = commands.add_parser(
        "agent",
        help="sample this host for the runs whose processes run on it",
        description="Every interval, find the processes whose environment has MLDIAG_RUN_ID, "
        "and write into each of those runs its processes' CPU, memory, threads and count, "
        "the host's CPU and memory and the accelerators present, tagged with this host. "
        "Never creates runs or changes their phase. Run it as root (or as the workloads' "
        "user) to see every process. Stops on SIGTERM or Ctrl-C.",
    )
    parser.add_argument(
        "--interval",
        type=seconds_argument,
        metavar="SECONDS",
        help="seconds between samples [$MLDIAG_SYSTEM_METRICS_INTERVAL or 10]",
    )
    parser.add_argument("--once", action="store_true", help="sample once, send, and exit")
    add_platform_options(parser, api=False)  # it only writes metrics
    parser.set_defaults(handler=agent_command)


def agent_command(args: argparse.Namespace) -> int:
    """``mldiag agent``: sample until stopped (or once); 0 when stopped cleanly."""
    interval = args.interval
    if interval is None:
        interval = env_seconds(os.environ, "MLDIAG_SYSTEM_METRICS_INTERVAL", 10.0)
    if interval <= 0:
        print("mldiag agent: error: --interval must be more than 0", file=sys.stderr)
        return 2
    settings = Settings.resolve(ingestion_url=args.ingestion_url, token=args.token)
    fast = contention_interval()
    agent = HostAgent(settings, host_name(), contention=fast > 0)
    if not agent.can_find_processes:
        print("mldiag agent: error: psutil is not installed (pip install psutil)", file=sys.stderr)
        return 1
    stop = threading.Event()
    with _stopping_on_signals(stop):
        try:
            if args.once:
                agent.sample(record=False)  # first CPU readings
                stop.wait(min(interval, _ONCE_WAIT_SECONDS))
                agent.sample()
            else:
                _sample_until(stop, agent, interval, fast)
        finally:
            agent.close(settings.shutdown_timeout)
    return 0


class HostAgent:
    """Samples one host for every run found on it."""

    def __init__(
        self,
        settings: Settings,
        host: str,
        sources: tuple[Callable[[], Source | None], ...] = (
            host_only_source,
            gpu_source,
            tpu_source,
        ),
        *,
        contention: bool = False,
    ) -> None:
        self._settings = settings
        self._host = host
        self._finder = RunProcesses()
        self._groups: dict[str, list[Any]] = {}
        """The runs' processes found by the last scan (contention reads them in between)."""
        self._contention = ContentionMeter.create() if contention else None
        self._fast_names: set[str] = set()
        """Series contention records every second: not recorded again every interval."""
        self._sources: list[Source] = start_sources(sources)
        self._meters: dict[str, ProcessMeter] = {}
        self._writers: dict[str, AttachedWriter] = {}

    @property
    def can_find_processes(self) -> bool:
        """Whether processes can be found at all (psutil is installed)."""
        return self._finder.available

    @property
    def runs(self) -> list[str]:
        """The runs being written to."""
        return sorted(self._writers)

    def sample(self, *, record: bool = True) -> dict[str, Sample]:
        """Find the runs here and measure them; record each run's sample unless ``record``
        is False (a first CPU reading). Runs whose processes are gone are closed."""
        groups = self._groups = self._finder.scan()
        shared = self._shared_sample() if record and groups else {}
        samples: dict[str, Sample] = {}
        for run_id, processes in groups.items():
            meter = self._meters.setdefault(run_id, ProcessMeter())
            samples[run_id] = {**meter.measure(processes), **shared}
            if record:
                writer = self._writers.get(run_id)
                if writer is None:
                    writer = self._writers[run_id] = AttachedWriter(
                        run_id, self._settings, self._host
                    )
                    logger.info("mldiag.agent.run_found run=%s", run_id)
                writer.record(samples[run_id])
        for run_id in set(self._meters) - set(groups):
            del self._meters[run_id]
            writer = self._writers.pop(run_id, None)
            if writer is not None:
                logger.info("mldiag.agent.run_gone run=%s", run_id)
                writer.close(self._settings.request_timeout)
        return samples

    def sample_contention(self) -> dict[str, Sample]:
        """Measure contention for every run of the last scan and record it (the host's
        counters once, each run's own processes, the top others while the host is busy)."""
        if self._contention is None:
            return {}
        finders = {run_id: partial(self._processes_of, run_id) for run_id in self._groups}
        try:
            samples = self._contention.measure(finders)
        except Exception:  # a broken reading stops contention, never the agent
            logger.warning("mldiag.agent.contention_failed (stopped)", exc_info=True)
            self._contention = None
            return {}
        for run_id, sample in samples.items():
            self._fast_names.update(name for name, _ in sample)
            writer = self._writers.get(run_id)
            if writer is not None:
                writer.record(sample)
        return samples

    def _processes_of(self, run_id: str) -> list[Any]:
        return self._groups.get(run_id, [])

    def close(self, timeout: float) -> None:
        """Send what every run's writer holds, within ``timeout`` seconds in all."""
        deadline = time.monotonic() + timeout
        for writer in self._writers.values():
            writer.close(max(deadline - time.monotonic(), 0.0))
        self._writers.clear()

    def _shared_sample(self) -> Sample:
        """The host's and the accelerators' metrics: the same for every run here."""
        values: Sample = {}
        for source in list(self._sources):
            try:
                values.update(
                    (key, value)
                    for key, value in source().items()
                    if key[0] not in self._fast_names
                )
            except Exception:  # a broken source is dropped, never raised
                logger.warning("mldiag.agent.source_failed (dropped)", exc_info=True)
                self._sources.remove(source)
        return values


def _sample_until(stop: threading.Event, agent: HostAgent, interval: float, fast: float) -> None:
    """Scan and sample every ``interval`` seconds, contention every ``fast`` (0: never)."""
    now = time.monotonic()
    due = now + interval
    fast_due = now + fast if fast > 0 else math.inf
    while not stop.wait(max(min(due, fast_due) - time.monotonic(), 0.0)):
        now = time.monotonic()
        if now >= due:
            agent.sample()
            due += interval * (int((now - due) // interval) + 1)  # skip, never bunch up
        if now >= fast_due:
            agent.sample_contention()
            fast_due += fast * (int((now - fast_due) // fast) + 1)


@contextlib.contextmanager
def _stopping_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM and SIGINT while inside (handlers restored afterwards)."""

    def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        stop.set()

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for name in (signal.SIGTERM, signal.SIGINT):
            previous[name] = signal.signal(name, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)

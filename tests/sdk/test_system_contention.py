"""The contention source against this Linux machine's real counters and real processes: a
busy child of the run counts as the run's, a busy stranger is named among the top processes
while the host is busy, and nobody is looked for while it is quiet."""

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mldiag.cli.agent import HostAgent
from mldiag.config import Settings
from mldiag.system import ContentionThresholds, Sample, contention_source, point_labels
from mldiag.system import names as n
from mldiag.system.contention import (
    ContentionMeter,
    TopProcesses,
    _psutil,
    _script,
    run_root,
)
from sdk.fake_platform import FakePlatform

PERCENTS = (
    n.HOST_CPU,
    n.HOST_CPU_USER,
    n.HOST_CPU_SYSTEM,
    n.HOST_CPU_IOWAIT,
    n.HOST_CPU_STEAL,
    n.RUN_CPU,
    n.HOST_SWAP,
    n.DISK_BUSY,
)
RATES = (
    n.HOST_SWAP_IO,
    n.DISK_READ,
    n.DISK_WRITE,
    n.NETWORK_RECEIVE,
    n.NETWORK_TRANSMIT,
)
QUIET = ContentionThresholds(others_cpu=1e9, host_cpu=1e9, host_memory=1e9)
"""Never contended, whatever the other tests on this machine do."""
BUSY = ContentionThresholds(others_cpu=1.0, host_cpu=1.0, top_cpu_every=0.0, top_count=100)
"""Always contended: a 2-core machine under test load ranks every time, and the whole
ranking is kept so the burner is in it however busy the neighbours are."""

BURN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end:\n    pass\n"


def _busy(tmp_path: Path, name: str = "stress.py") -> subprocess.Popen[bytes]:
    script = tmp_path / name
    script.write_text(BURN)
    return subprocess.Popen([sys.executable, "-u", str(script)])


@pytest.fixture
def burner(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = _busy(tmp_path)
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def idle_run() -> Iterator[int]:
    """A run's root process that does nothing (as ``mldiag run``'s program might)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def _samples(source: object, count: int, pause: float = 0.3) -> list[Sample]:
    assert callable(source)
    samples = []
    for _ in range(count):
        time.sleep(pause)
        samples.append(source())
    return samples


def test_the_host_is_read_from_its_counters_with_shares_in_range_and_rates_not_negative() -> None:
    source = contention_source(thresholds=QUIET)
    assert source is not None
    [values] = _samples(source, 1)
    present = {name for name, _ in values}
    # Linux keeps every one of them; only disk busy time may be hidden (no block devices).
    assert {*PERCENTS, *RATES, n.HOST_LOAD, n.RUN_MEMORY} - present <= {n.DISK_BUSY}
    for name in PERCENTS:
        if (name, "") in values:
            assert 0.0 <= values[name, ""] <= 100.0, name
    for name in RATES:
        assert values[name, ""] >= 0.0, name
    modes = (n.HOST_CPU_USER, n.HOST_CPU_SYSTEM, n.HOST_CPU_IOWAIT, n.HOST_CPU_STEAL)
    assert sum(values[mode, ""] for mode in modes) <= 100.0 + 1e-6
    assert values[n.HOST_LOAD, ""] >= 0.0
    assert values[n.RUN_MEMORY, ""] > 10 * 2**20  # this Python process at least
    assert values[n.HOST_CPU_COUNT, ""] == float(os.cpu_count() or 1)


def test_a_busy_child_counts_as_the_runs_cpu(burner: subprocess.Popen[bytes]) -> None:
    cpus = os.cpu_count() or 1
    # The SDK's view: this process's tree, where the burner is a child...
    own = contention_source(thresholds=QUIET)
    # ...and `mldiag run`'s: the tree of the program's pid.
    program = contention_source(burner.pid, thresholds=QUIET)
    assert own is not None and program is not None
    time.sleep(1.0)
    own_values, program_values = own(), program()
    one_core = 100.0 / cpus
    # A busy loop takes a core where it can; a loaded test machine gives it less.
    assert own_values[n.RUN_CPU, ""] > 0.05 * one_core
    assert program_values[n.RUN_CPU, ""] > 0.05 * one_core
    assert program_values[n.RUN_CPU, ""] <= own_values[n.HOST_CPU, ""] + 5.0


def test_a_child_started_later_is_found_at_the_next_look(tmp_path: Path) -> None:
    source = contention_source(
        thresholds=ContentionThresholds(
            others_cpu=1e9, host_cpu=1e9, host_memory=1e9, children_every=0.0
        )
    )
    assert source is not None
    source()
    late = _busy(tmp_path)
    try:
        samples = _samples(source, 3, pause=0.4)  # found, then measured from its 2nd reading
    finally:
        late.kill()
        late.wait()
    assert max(sample[n.RUN_CPU, ""] for sample in samples) > 0.05 * 100.0 / (os.cpu_count() or 1)


def test_a_busy_stranger_is_named_among_the_top_processes_by_its_script(
    burner: subprocess.Popen[bytes], idle_run: int
) -> None:
    source = contention_source(idle_run, thresholds=BUSY)
    assert source is not None
    samples = _samples(source, 2, pause=0.5)  # a baseline walk, then a ranking
    top = {
        (labels[n.PROCESS_LABEL], labels[n.PID_LABEL]): value
        for (name, label), value in samples[-1].items()
        if name == n.TOP_PROCESS_CPU and (labels := point_labels(label))
    }
    named = {pid: process for process, pid in top}
    assert named[str(burner.pid)].endswith(" stress.py")  # "python stress.py", not "python"
    assert named[str(burner.pid)].startswith("python")
    assert str(idle_run) not in named and str(os.getpid()) not in named  # the run, the sampler
    assert all(0.0 < value <= 100.0 for value in top.values())


def test_nobody_is_looked_for_while_the_host_is_quiet(burner: subprocess.Popen[bytes]) -> None:
    source = contention_source(thresholds=QUIET)
    assert source is not None
    for values in _samples(source, 3, pause=0.2):
        assert not [name for name, label in values if not isinstance(label, str)]


def test_the_walk_of_every_process_happens_only_while_contended_and_at_most_so_often() -> None:
    psutil = _psutil()
    top = TopProcesses(psutil, ContentionThresholds(top_cpu_every=5.0, top_memory_every=10.0))
    walks: list[float] = []
    walk = top._walk

    def counted() -> Any:
        walks.append(time.monotonic())
        return walk()

    top._walk = counted  # type: ignore[method-assign]
    for at in (0.0, 1.0, 2.0):
        top.update(at, cpu=False, memory=False)
        assert top.sample(set()) == {}
    assert walks == []
    top.update(10.0, cpu=True, memory=False)  # the baseline
    assert top.sample(set()) == {}
    top.update(11.0, cpu=True, memory=False)  # the first ranking, one interval later
    ranked = top.sample(set())
    top.update(12.0, cpu=True, memory=False)  # within 5 s of it: no walk
    assert top.sample(set()) == {}
    top.update(16.0, cpu=True, memory=True)  # both due: one walk serves both rankings
    both = {name for name, _ in top.sample(set())}
    assert len(walks) == 3
    assert {name for name, _ in ranked} <= {n.TOP_PROCESS_CPU}
    assert n.TOP_PROCESS_MEMORY in both
    top.update(17.0, cpu=False, memory=False)  # calm: the baseline is dropped...
    top.update(18.0, cpu=True, memory=False)  # ...so busy again starts with a new one
    assert top.sample(set()) == {} and len(walks) == 4


def test_the_top_processes_by_memory_are_named_while_memory_is_short(idle_run: int) -> None:
    thresholds = ContentionThresholds(
        others_cpu=1e9, host_cpu=1e9, host_memory=0.0, top_memory_every=0.0, top_count=3
    )
    source = contention_source(idle_run, thresholds=thresholds)
    assert source is not None
    [values] = _samples(source, 1, pause=0.1)
    top = [
        (point_labels(label), value)
        for (name, label), value in values.items()
        if name == n.TOP_PROCESS_MEMORY
    ]
    assert len(top) == 3
    assert all(labels and labels[n.PID_LABEL] != str(idle_run) for labels, _ in top)
    assert all(0.0 < value <= 100.0 for _, value in top)


@pytest.mark.parametrize(
    ("arguments", "script"),
    [
        (["-u", "/tmp/x/stress.py", "--steps", "3"], "stress.py"),
        (["-m", "torch.distributed.run", "train.py"], "torch.distributed.run"),
        (["-X", "dev", "-W", "ignore", "train.py"], "train.py"),
        (["-c", "print(1)"], "-c"),
        (["-cp", "app.jar", "Main"], "Main"),
        ([], ""),
    ],
)
def test_an_interpreter_is_named_by_its_first_argument_that_is_not_an_option(
    arguments: list[str], script: str
) -> None:
    assert _script(arguments) == script


def test_the_agents_runs_each_see_the_others_among_their_top_processes(
    tmp_path: Path,
) -> None:
    psutil = _psutil()
    first, second = _busy(tmp_path, "first.py"), _busy(tmp_path, "second.py")
    try:
        meter = ContentionMeter(psutil, BUSY)
        runs = {
            "run-a": lambda: [psutil.Process(first.pid)],
            "run-b": lambda: [psutil.Process(second.pid)],
        }
        meter.measure(runs)
        time.sleep(0.5)
        meter.measure(runs)  # the baseline walk (the host is "busy" from here on)
        time.sleep(0.5)
        samples = meter.measure(runs)
    finally:
        for process in (first, second):
            process.kill()
            process.wait()
    cpus = os.cpu_count() or 1

    def top_pids(run_id: str) -> set[str]:
        return {
            labels[n.PID_LABEL]
            for (name, label), _ in samples[run_id].items()
            if name == n.TOP_PROCESS_CPU and (labels := point_labels(label))
        }

    assert str(second.pid) in top_pids("run-a") and str(first.pid) not in top_pids("run-a")
    assert str(first.pid) in top_pids("run-b") and str(second.pid) not in top_pids("run-b")
    for run_id in runs:
        assert samples[run_id][n.RUN_CPU, ""] > 0.05 * 100.0 / cpus
        assert samples[run_id][n.HOST_CPU, ""] == samples["run-a"][n.HOST_CPU, ""]  # read once
    assert set(meter.measure({"run-a": runs["run-a"]})) == {"run-a"}  # run-b forgotten


def test_the_agent_records_contention_into_each_run_it_found(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run_id = f"agent-{uuid.uuid4().hex[:12]}"
    script = tmp_path / "train.py"
    script.write_text(BURN)
    workload = subprocess.Popen(
        [sys.executable, str(script)], env={**os.environ, "MLDIAG_RUN_ID": run_id}
    )
    settings = Settings.resolve(ingestion_url=platform.url, token="t", spool_dir=tmp_path / "s")
    agent = HostAgent(settings, "host-a", sources=(), contention=True)
    try:
        agent.sample()  # finds the run (and opens its writer)
        agent.sample_contention()  # the first readings of its processes
        time.sleep(0.5)
        samples = agent.sample_contention()
    finally:
        workload.kill()
        workload.wait()
        agent.close(5.0)
    assert samples[run_id][n.RUN_CPU, ""] > 0.05 * 100.0 / (os.cpu_count() or 1)
    names = {name for name, _, _ in platform.received.points()}
    assert {n.RUN_CPU, n.RUN_MEMORY, n.HOST_CPU_USER, n.HOST_LOAD} <= names


def test_under_a_local_launcher_the_run_is_the_launchers_tree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert run_root() == os.getpid()
    monkeypatch.setenv("LOCAL_RANK", "0")  # torchrun's rank 0: its siblings are the run's
    assert run_root() == os.getppid()

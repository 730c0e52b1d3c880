"""The context of an event: contention on each host from the deviation's start on, against
the run's early samples."""

from collections.abc import Sequence

from event_detector.feed import Feed
from mldiag_schemas import monitoring as names
from mldiag_schemas.events import (
    Contention,
    ProcessShare,
    WorkloadEventOpened,
    WorkloadEventUpdated,
)
from mldiag_schemas.telemetry import MetricColumns, to_unix_micros


def _sample(
    feed: Feed,
    step: int,
    pace: float,
    signals: dict[str, float],
    processes: Sequence[tuple[str, int, float]] = (),
) -> None:
    """One second of a host: its step, its contention signals and its top other processes."""
    feed.advance(pace)
    message = feed.metrics("h0", step, {names.STEP_TIME: pace, **signals})
    message.series.extend(
        MetricColumns(
            name=names.TOP_PROCESS_CPU,
            host="h0",
            labels={names.PROCESS_LABEL: name, names.PID_LABEL: str(pid)},
            steps=[step],
            values=[cpu],
            times_unix_us=[to_unix_micros(feed.now)],
        )
        for name, pid, cpu in processes
    )
    feed.send(message)


def _contention(feed: Feed) -> Contention:
    [opened] = [change for change in feed.changes if isinstance(change, WorkloadEventOpened)]
    assert opened.context is not None
    [host] = opened.context.hosts
    assert host.contention is not None
    return host.contention


def test_a_slowdown_from_other_processes_names_them_and_their_share() -> None:
    feed = Feed()
    quiet = {
        names.HOST_CPU: 30.0,
        names.RUN_CPU: 25.0,
        names.HOST_CPU_USER: 28.0,
        names.HOST_LOAD: 0.4,
        names.DISK_READ: 1e6,
        names.DISK_WRITE: 2e6,
    }
    for step in range(1, 41):
        # An editor the user closed early on: stale by the time anything happens.
        early = [("code", 300, 3.0)] if step < 5 else []
        _sample(feed, step, 1.0 + 0.01 * (step % 3), quiet, early)
    busy = {**quiet, names.HOST_CPU: 95.0, names.HOST_CPU_USER: 90.0, names.HOST_LOAD: 3.2}
    for step in range(41, 80):
        others = [("stress-ng", 4242, 60.0), ("python3", 5151, 8.0)] if step % 2 else []
        _sample(feed, step, 3.0, busy, others)
    contention = _contention(feed)
    assert contention.top_processes == [
        ProcessShare(name="stress-ng", pid=4242, cpu_percent=60.0),
        ProcessShare(name="python3", pid=5151, cpu_percent=8.0),
    ]
    assert contention.run_cpu_percent == 25.0
    assert contention.run_cpu_baseline_percent == 25.0
    assert contention.other_cpu_percent == 70.0  # host minus run
    assert contention.other_cpu_baseline_percent == 5.0
    assert contention.cpu_user_percent == 90.0
    assert contention.load_per_cpu == 3.2
    assert contention.disk_bytes_per_second_baseline == 3e6
    assert contention.cpu_steal_percent is None  # not sampled here
    assert contention.cpu_count is None  # nor the host's CPU count


def test_the_hosts_cpu_count_comes_with_its_contention() -> None:
    feed = Feed()
    quiet = {names.HOST_CPU: 30.0, names.RUN_CPU: 25.0, names.HOST_CPU_COUNT: 8.0}
    for step in range(1, 41):
        _sample(feed, step, 1.0 + 0.01 * (step % 3), quiet)
    busy = {**quiet, names.HOST_CPU: 95.0}
    for step in range(41, 80):
        _sample(feed, step, 3.0, busy, [("stress-ng", 4242, 70.0)])
    assert _contention(feed).cpu_count == 8


def test_processes_sampled_after_the_slowdown_opened_re_announce_it_once() -> None:
    feed = Feed()
    quiet = {names.HOST_CPU: 30.0, names.RUN_CPU: 25.0}
    for step in range(1, 41):
        _sample(feed, step, 1.0 + 0.01 * (step % 3), quiet)
    busy = {names.HOST_CPU: 95.0, names.RUN_CPU: 25.0}
    for step in range(41, 70):
        _sample(feed, step, 3.0, busy)
    [opened] = [change for change in feed.changes if isinstance(change, WorkloadEventOpened)]
    assert _contention(feed).top_processes == []  # the cause could not be named yet
    _sample(feed, 70, 3.0, busy, [("stress-ng", 4242, 60.0)])
    for step in range(71, 80):
        _sample(feed, step, 3.0, busy, [("stress-ng", 4242, 61.0)])
    [update] = [
        change
        for change in feed.changes
        if isinstance(change, WorkloadEventUpdated) and change.context is not None
    ]
    assert update.event.event_id == opened.event.event_id
    assert update.context is not None
    [host] = update.context.hosts
    assert host.contention is not None
    assert [p.name for p in host.contention.top_processes] == ["stress-ng"]


def test_accelerator_faults_are_in_the_contention_of_the_host() -> None:
    feed = Feed()
    for step in range(1, 41):
        _sample(feed, step, 1.0 + 0.01 * (step % 3), {names.GPU_ECC_ERRORS: 2.0})
    for step in range(41, 70):
        signals = {
            names.GPU_ECC_ERRORS: 5.0,
            names.GPU_THROTTLE_REASONS: 0x4 | 0x20,
            names.GPU_PCIE_RX: 1e9,
            names.GPU_PCIE_TX: 5e8,
        }
        if step == 45:
            signals[names.GPU_XID] = 79.0
        _sample(feed, step, 2.0, signals)
    contention = _contention(feed)
    assert contention.accelerator_ecc_errors == 3.0  # since the run's first sample
    assert contention.accelerator_xid_errors == [79]
    assert contention.accelerator_throttle_reasons == ["power", "thermal"]
    assert contention.pcie_bytes_per_second == 1.5e9


def test_a_host_that_samples_no_contention_has_none() -> None:
    feed = Feed()
    for step in range(1, 41):
        _sample(feed, step, 1.0 + 0.01 * (step % 3), {})
    for step in range(41, 70):
        _sample(feed, step, 2.0, {})
    assert [change for change in feed.changes if isinstance(change, WorkloadEventOpened)]
    [opened] = [change for change in feed.changes if isinstance(change, WorkloadEventOpened)]
    assert opened.context is not None
    assert opened.context.hosts[0].contention is None


def test_the_baseline_is_what_was_normal_just_before_the_slowdown() -> None:
    # Load came and went in the run's first seconds (where a baseline of the first samples
    # would sit), then the host was quiet, then the load came back and the steps slowed.
    feed = Feed()
    early_load = {names.HOST_CPU: 90.0, names.RUN_CPU: 20.0}
    quiet = {names.HOST_CPU: 30.0, names.RUN_CPU: 25.0}
    for step in range(1, 15):
        _sample(feed, step, 1.0 + 0.01 * (step % 3), early_load)
    for step in range(15, 41):
        _sample(feed, step, 1.0 + 0.01 * (step % 3), quiet)
    busy = {names.HOST_CPU: 95.0, names.RUN_CPU: 15.0}
    for step in range(41, 80):
        _sample(feed, step, 3.0, busy, [("burner.py", 4242, 80.0)])
    contention = _contention(feed)
    assert contention.other_cpu_baseline_percent == 5.0  # not the early 70
    assert contention.run_cpu_baseline_percent == 25.0
    assert contention.other_cpu_percent == 80.0

"""The sampler's two cadences, labelled samples, the interval setting, and the metric names
the SDK keeps as literals against the contracts' constants."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import mldiag
from mldiag.config import contention_interval
from mldiag.system import (
    ContentionThresholds,
    Sample,
    SystemSampler,
    by_labels,
    contention,
    point_labels,
)
from mldiag.system import names as sdk_names
from mldiag_schemas import monitoring
from sdk.fake_platform import FakePlatform

_SPIN_FOR_FIVE_SECONDS = "import time\nend = time.time() + 5\nwhile time.time() < end: pass"


def test_fast_sources_run_at_their_cadence_and_their_series_leave_the_slow_samples() -> None:
    samples: list[tuple[str, Sample]] = []
    done = threading.Event()
    lock = threading.Lock()

    def slow() -> Sample:
        with lock:
            samples.append(("slow", {}))
        return {("host_cpu_utilization", ""): 50.0, ("host_memory_utilization", ""): 10.0}

    def fast() -> Sample:
        with lock:
            samples.append(("fast", {}))
            if sum(kind == "slow" for kind, _ in samples) >= 2:
                done.set()
        return {("host_cpu_utilization", ""): 40.0}

    recorded: list[Sample] = []
    sampler = SystemSampler(
        recorded.append,
        0.2,
        sources=(lambda: slow,),
        fast_sources=(lambda: fast,),
        fast_interval=0.02,
    )
    sampler.start()
    assert done.wait(10)
    sampler.stop()
    kinds = [kind for kind, _ in samples]
    assert kinds.count("fast") >= 3 * kinds.count("slow")
    # The slow source's CPU is the fast source's series: recorded once, at one cadence.
    slow_recorded = [s for s in recorded if ("host_memory_utilization", "") in s]
    assert slow_recorded and all(("host_cpu_utilization", "") not in s for s in slow_recorded)


def test_no_fast_interval_means_the_slow_cadence_alone() -> None:
    recorded: list[Sample] = []
    done = threading.Event()

    def slow() -> Sample:
        done.set()
        return {("x", ""): 1.0}

    def fast() -> Sample:
        raise AssertionError("contention is off")

    sampler = SystemSampler(
        recorded.append, 0.01, sources=(lambda: slow,), fast_sources=(lambda: fast,)
    )
    sampler.start()
    assert done.wait(5)
    time.sleep(0.05)
    sampler.stop()
    assert recorded and all(sample == {("x", ""): 1.0} for sample in recorded)


def test_a_sample_is_grouped_by_its_labels() -> None:
    top = (("process", "python stress.py"), ("pid", "42"))
    sample: Sample = {
        ("host_cpu_utilization", ""): 90.0,
        ("gpu_utilization", "0"): 80.0,
        ("host_top_process_cpu_percent", top): 45.0,
        ("host_top_process_memory_percent", top): 3.0,
    }
    assert sorted(by_labels(sample), key=repr) == sorted(
        [
            (None, {"host_cpu_utilization": 90.0}),
            ({"device": "0"}, {"gpu_utilization": 80.0}),
            (
                {"process": "python stress.py", "pid": "42"},
                {"host_top_process_cpu_percent": 45.0, "host_top_process_memory_percent": 3.0},
            ),
        ],
        key=repr,
    )
    assert point_labels("") is None and point_labels("1") == {"device": "1"}


@pytest.mark.parametrize(("value", "expected"), [("", 1.0), ("0", 0.0), ("0.5", 0.5)])
def test_the_contention_interval_comes_from_the_environment(value: str, expected: float) -> None:
    assert contention_interval({"MLDIAG_CONTENTION_INTERVAL": value}) == expected


@pytest.mark.parametrize("value", ["often", "-1", "nan"])
def test_a_bad_contention_interval_is_a_clear_error(value: str) -> None:
    with pytest.raises(ValueError, match="MLDIAG_CONTENTION_INTERVAL"):
        contention_interval({"MLDIAG_CONTENTION_INTERVAL": value})


def test_the_sdks_metric_names_are_the_contracts() -> None:
    pairs = {
        "HOST_CPU": "HOST_CPU",
        "HOST_MEMORY": "HOST_MEMORY",
        "GPU_THROTTLED": "THROTTLED",
        **{
            name: name
            for name in vars(sdk_names)
            if name.isupper()
            and name not in ("HOST_CPU", "HOST_MEMORY", "GPU_THROTTLED")
            and hasattr(monitoring, name)
        },
    }
    assert len(pairs) >= 25  # every contention name, not a lucky few
    for sdk, schema in pairs.items():
        assert getattr(sdk_names, sdk) == getattr(monitoring, schema), sdk
    contention = [
        name
        for name in vars(monitoring)
        if name.startswith(("HOST_", "RUN_", "DISK_", "NETWORK_", "TOP_", "GPU_"))
        or name in ("PROCESS_LABEL", "PID_LABEL")
    ]
    assert set(contention) <= set(vars(sdk_names))  # none of the contracts' names missing


def test_an_sdk_run_sends_contention_every_interval_with_the_top_processes_labels(
    platform: FakePlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLDIAG_CONTENTION_INTERVAL", "0.1")
    # Always "contended", so the top processes are ranked on this machine however quiet.
    busy = ContentionThresholds(others_cpu=0.0, host_cpu=0.0, top_cpu_every=0.0)
    monkeypatch.setattr(contention, "ContentionThresholds", lambda: busy)
    # Ranking needs another process that spends CPU within 0.1 s: a quiet machine may have
    # none. This one is nobody's child by the time the run starts (its shell has exited), so
    # it is not the run's own, and it stops by itself.
    subprocess.run(
        ["/bin/sh", "-c", f"{sys.executable} -c '{_SPIN_FOR_FIVE_SECONDS}' >/dev/null 2>&1 &"],
        check=True,
    )
    run = mldiag.init(
        name="contention",
        api_url=platform.url,
        ingestion_url=platform.url,
        spool_dir=tmp_path,
        handle_exit=False,
        flush_interval=0.05,
        heartbeat_interval=0,
        system_metrics_interval=30.0,  # the slow sources stay out of the way
    )
    run.log({"loss": 1.0}, step=7)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (
        len(platform.received.points(sdk_names.RUN_CPU)) < 3
        or not platform.received.points(sdk_names.TOP_PROCESS_CPU)
    ):
        time.sleep(0.05)
    run.finish()
    assert len(platform.received.points(sdk_names.RUN_CPU)) >= 3  # every 0.1 s, not every 30
    assert {step for _, step, _ in platform.received.points(sdk_names.HOST_CPU_USER)} <= {0, 7}
    top = [
        series["labels"]
        for batch in platform.received.batches
        for series in batch["series"]
        if series["name"] == sdk_names.TOP_PROCESS_CPU
    ]
    assert top and all(set(labels) == {"process", "pid"} for labels in top)
    assert all(labels["pid"] != str(os.getpid()) for labels in top)  # never the run's own

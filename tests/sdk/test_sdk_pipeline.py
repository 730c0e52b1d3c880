"""The SDK's hot path against a tiny in-process platform: batching, retries, spool, shutdown."""

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mldiag
from mldiag.encoding import Encoder, decode_body, to_float
from mldiag.spool import Spool
from sdk.fake_platform import FakePlatform


def start(platform_url: str, spool: Path, **kwargs: Any) -> mldiag.Run:
    options: dict[str, Any] = {
        "name": "test",
        "api_url": platform_url,
        "ingestion_url": platform_url,
        "spool_dir": spool,
        "handle_exit": False,
        "flush_interval": 0.05,
        "shutdown_timeout": 5.0,
        "request_timeout": 2.0,
        "log_system_metrics": False,  # exact point counts below (contention comes every 1 s)
    }
    options.update(kwargs)
    return mldiag.init(**options)


def wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met")
        time.sleep(0.02)


def pending_segments(spool: Path) -> list[Path]:
    return sorted(spool.glob("*/*/*.seg"))


def test_log_sends_one_columnar_batch_and_completes(platform: FakePlatform, tmp_path: Path) -> None:
    run = start(platform.url, tmp_path, batch_points=1000, flush_interval=30)
    for index in range(10):
        run.log({"loss": 1.0 / (index + 1), "lr": 0.1})
    assert run.step == 10
    assert run.finish() is True

    assert len(platform.received.batches) == 1
    batch = platform.received.batches[0]
    by_name = {series["name"]: series for series in batch["series"]}
    assert by_name["loss"]["steps"] == list(range(10))
    assert by_name["lr"]["values"] == [0.1] * 10
    assert by_name["loss"]["host"] == run.host
    assert len(by_name["loss"]["times"]) == 10
    assert platform.received.encodings == [""]  # a frame, not gzipped (see mldiag.encoding)
    assert platform.received.creates[0]["runId"] == run.run_id
    assert platform.received.creates[0]["displayName"] == "test"
    [(run_id, query, body)] = platform.received.patches
    assert run_id == run.run_id
    assert query == {"updateMask": "runPhase,errorDetails"}
    assert body == {"runPhase": "COMPLETED", "errorDetails": {"message": ""}, "etag": "e1"}
    assert not pending_segments(tmp_path)


def test_batches_by_size_keep_call_order(platform: FakePlatform, tmp_path: Path) -> None:
    run = start(platform.url, tmp_path, batch_points=10)
    for step in range(50):
        run.log({"a": step, "b": -step}, step=step * 2)
    run.finish()
    assert len(platform.received.batches) >= 5
    assert all(
        sum(len(s["steps"]) for s in batch["series"]) <= 10 for batch in platform.received.batches
    )
    assert [step for _, step, _ in platform.received.points("a")] == list(range(0, 100, 2))


def test_retries_keep_the_batch_id_so_the_server_stores_once(
    platform: FakePlatform, tmp_path: Path
) -> None:
    platform.fail_first_writes = 2
    run = start(platform.url, tmp_path, batch_points=1000, flush_interval=30)
    run.log({"loss": 1.0})
    run.log({"loss": 2.0})
    assert run.finish() is True
    assert len(platform.received.attempts) == 3
    assert len(set(platform.received.attempts)) == 1
    assert platform.received.points() == [("loss", 0, 1.0), ("loss", 1, 2.0)]


def test_outage_spools_to_disk_and_replays_in_order(tmp_path: Path) -> None:
    down = FakePlatform()  # not started: its port is closed
    run = start(down.url, tmp_path, batch_points=20)
    for step in range(200):
        run.log({"loss": float(step)})
        if step % 50 == 0:
            time.sleep(0.06)  # let several batches form
    wait_for(lambda: len(pending_segments(tmp_path)) >= 1)
    assert run.flush(timeout=0.3) is False

    down.start()
    try:
        assert run.flush(timeout=10) is True
        assert [step for _, step, _ in down.received.points()] == list(range(200))
        assert len(down.received.batches) >= 10
        run.finish()
        assert not pending_segments(tmp_path)
    finally:
        down.stop()


def test_during_an_outage_new_batches_do_not_cut_the_backoff_short(tmp_path: Path) -> None:
    platform = FakePlatform()
    platform.fail_first_writes = 10**6  # down for good: every write answers 503
    platform.start()
    try:
        run = start(platform.url, tmp_path, batch_points=10)
        started = time.monotonic()
        step = 0
        while time.monotonic() - started < 2.0:  # a batch every collect (50 ms)
            run.log({"loss": 1.0}, step=step)
            step += 1
            time.sleep(0.005)
        # backoff from 0.25 s doubling with jitter (0.5-1x): at most ~6 tries in 2 s, where
        # retrying per new batch made one per collect (~40)
        assert len(platform.received.attempts) <= 8
        tries = len(platform.received.attempts)
        assert run.flush(timeout=0.5) is False  # a flush still retries at once
        assert len(platform.received.attempts) > tries
        run.finish(timeout=0.2)
    finally:
        platform.stop()


def test_a_restart_replays_what_the_last_process_left(tmp_path: Path) -> None:
    down = FakePlatform()
    first = start(down.url, tmp_path, run_id="restart-run", batch_points=5)
    for step in range(30):
        first.log({"loss": float(step)})
    assert first.finish(timeout=0.5) is False  # bounded, and the points stay spooled
    other = start(down.url, tmp_path, run_id="other-run")
    other.log({"x": 1.0})
    assert other.finish(timeout=0.3) is False
    assert len(pending_segments(tmp_path)) >= 2

    down.start()
    try:
        again = start(down.url, tmp_path, run_id="restart-run", replay_all=True)
        again.log({"loss": 30.0}, step=30)
        assert again.finish() is True
        assert [step for _, step, _ in down.received.points("loss")] == list(range(31))
        assert down.received.points("x") == [("x", 0, 1.0)]  # another run's orphan spool
        assert not pending_segments(tmp_path)
    finally:
        down.stop()


def test_memory_is_bounded_and_overflow_goes_to_the_spool(tmp_path: Path) -> None:
    down = FakePlatform()
    run = start(down.url, tmp_path, batch_points=50, max_buffered_points=100, flush_interval=60)
    pipeline = run._pipeline
    wake = pipeline._wake_collector.set
    pipeline._wake_collector.set = lambda: None  # type: ignore[method-assign]  # a stuck collector
    largest = 0
    for step in range(1000):
        run.log({"loss": float(step)})
        largest = max(largest, len(pipeline._buffer))
    assert largest <= 101
    assert pipeline.spilled > 0
    assert len(pending_segments(tmp_path)) >= 1
    pipeline._wake_collector.set = wake  # type: ignore[method-assign]
    down.start()
    try:
        assert run.finish() is True
        assert [step for _, step, _ in down.received.points()] == list(range(1000))
    finally:
        down.stop()


def test_shutdown_is_bounded_even_when_the_server_never_answers(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        run = start(url, tmp_path, request_timeout=30.0)
        for step in range(100):
            run.log({"loss": float(step)})
        began = time.monotonic()
        assert run.finish(timeout=1.0) is False
        assert time.monotonic() - began < 2.0
    assert pending_segments(tmp_path)


def test_a_rejected_batch_is_dead_lettered_not_retried(
    platform: FakePlatform, tmp_path: Path
) -> None:
    platform.write_status = 400
    run = start(platform.url, tmp_path, batch_points=1000)
    run.log({"loss": 1.0})
    wait_for(lambda: run._pipeline.dead_batches == 1)
    platform.write_status = 202
    run.log({"loss": 2.0})
    assert run.finish() is True
    assert len(platform.received.attempts) == 2  # the bad batch was tried once
    assert platform.received.points() == [("loss", 1, 2.0)]
    [line] = (tmp_path / "dead-letter" / f"{run.run_id}.jsonl").read_text().splitlines()
    letter = json.loads(line)
    assert letter["status"] == 400
    assert letter["request"]["series"][0]["values"] == [1.0]


def test_retryable_4xx_keeps_the_batch(platform: FakePlatform, tmp_path: Path) -> None:
    platform.write_status = 401  # a wrong token is not the batch's fault
    run = start(platform.url, tmp_path, batch_points=1000)
    run.log({"loss": 1.0})
    wait_for(lambda: len(platform.received.attempts) >= 2)
    platform.write_status = 202
    assert run.finish() is True
    assert platform.received.points() == [("loss", 0, 1.0)]
    assert not (tmp_path / "dead-letter").exists()


class DeviceValue:
    """Stands in for a JAX array: remembers which thread converted it."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.converted_on: str | None = None

    def __float__(self) -> float:
        self.converted_on = threading.current_thread().name
        return self.value


def test_numpy_and_device_values_are_converted_off_the_training_thread(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform.url, tmp_path)
    device = DeviceValue(4.0)
    run.log(
        {
            "f32": np.float32(1.5),
            "scalar": np.array(2.0),
            "mean": np.array([1.0, 2.0, 3.0]),
            "i64": np.int64(7),
            "list": [1, 3],
            "nan": float("nan"),
            "device": device,
        },
        step=np.int64(3),  # type: ignore[arg-type]  # numpy ints are accepted too
    )
    assert device.converted_on is None  # log only kept a reference
    run.finish()
    assert device.converted_on is not None
    assert device.converted_on != threading.main_thread().name
    values = {name: value for name, _, value in platform.received.points()}
    assert values["f32"] == 1.5
    assert values["scalar"] == 2.0
    assert values["mean"] == 2.0
    assert values["i64"] == 7.0
    assert values["list"] == 2.0
    assert values["device"] == 4.0
    assert values["nan"] != values["nan"]
    assert {step for _, step, _ in platform.received.points()} == {3}


def test_bad_names_and_values_are_dropped_alone(platform: FakePlatform, tmp_path: Path) -> None:
    run = start(platform.url, tmp_path)
    run.log({"ok": 1.0, "bad name!": 2.0, "not_a_number": "x"})
    run.finish()
    assert platform.received.points() == [("ok", 0, 1.0)]


def test_an_exception_in_the_block_fails_the_run(platform: FakePlatform, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="boom"), start(platform.url, tmp_path) as run:
        run.log({"loss": 1.0})
        raise ValueError("boom")
    [(_, _, body)] = platform.received.patches
    assert body["runPhase"] == "FAILED"
    assert body["errorDetails"] == {"message": "ValueError: boom", "code": "ValueError"}
    assert platform.received.points() == [("loss", 0, 1.0)]


def test_a_server_without_phase_updates_warns_once(
    platform: FakePlatform, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    platform.supports_patch = False
    run = start(platform.url, tmp_path)
    run.log({"loss": 1.0})
    assert run.finish() is True
    assert [r for r in caplog.records if "phase_unsupported" in r.getMessage()]


def test_attach_on_409_and_only_process_zero_changes_the_run(
    platform: FakePlatform, tmp_path: Path
) -> None:
    first = start(platform.url, tmp_path, workload_id="job-7", process_index=0)
    second = start(platform.url, tmp_path, workload_id="job-7", process_index=1)
    assert first.run_id == second.run_id
    first.log({"loss": 1.0})
    second.log({"loss": 2.0})
    second.finish()
    first.finish()
    assert len(platform.received.creates) == 1
    assert len(platform.received.patches) == 1
    assert sorted(value for _, _, value in platform.received.points()) == [1.0, 2.0]

    again = start(platform.url, tmp_path, workload_id="job-7")
    wait_for(lambda: len(platform.received.patches) == 2)  # a restart resumes: ACTIVE
    again.finish()
    assert len(platform.received.creates) == 2  # the 409 meant: attach
    assert len(platform.received.runs) == 1
    assert [body["runPhase"] for _, _, body in platform.received.patches] == [
        "COMPLETED",
        "ACTIVE",
        "COMPLETED",
    ]


def test_official_names_record_at_the_current_step(platform: FakePlatform, tmp_path: Path) -> None:
    run = mldiag.machinelearning_run(
        "official",
        run_group="group",
        configs={"lr": 0.1},
        base_url=platform.url,
        ingestion_url=platform.url,
        spool_dir=tmp_path,
        handle_exit=False,
        flush_interval=0.05,
    )
    assert mldiag.current_run() is run
    run.log({"loss": 1.0}, step=5)
    mldiag.metrics.record("grad_norm", 2.0)
    mldiag.metrics.record_metrics(
        [{"metric_name": "mfu", "value": 40.0}, {"metric_name": "tflops", "value": 1, "step": 9}]
    )
    run.finish()
    assert mldiag.current_run() is None
    mldiag.metrics.record("ignored", 1.0)  # no run: a warning, never an error
    points = {name: step for name, step, _ in platform.received.points()}
    assert points == {"loss": 5, "grad_norm": 5, "mfu": 5, "tflops": 9}
    create = platform.received.creates[0]
    assert create["runSet"] == "group"
    assert create["configs"]["userConfigs"] == {"lr": 0.1}


def test_labels_group_series(tmp_path: Path) -> None:
    encoder = Encoder("host-a")
    batch = encoder.encode(
        [
            (0, 0.0, {"loss": 1.0}, {"chip": "0"}),
            (0, 0.0, {"loss": 2.0}, {"chip": "1"}),
            (1, 0.0, {"loss": 3.0}, {"chip": "0"}),
        ]
    )
    assert batch is not None
    body = decode_body(batch.body)
    assert [(s["labels"], s["steps"]) for s in body["series"]] == [
        ({"chip": "0"}, [0, 1]),
        ({"chip": "1"}, [0]),
    ]
    assert to_float(np.array([])) != to_float(np.array([]))


def test_a_torn_tail_in_a_segment_is_ignored(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "run" / "w", "run")
    spool.append(b"first")
    spool.append(b"second")
    spool.close()
    segment = next((tmp_path / "run" / "w").glob("*.seg"))
    segment.write_bytes(segment.read_bytes()[:-3])  # a crash mid-write
    reopened = Spool(tmp_path / "run" / "w", "run")
    record = reopened.peek()
    assert record is not None
    assert record.payload == b"first"
    reopened.ack(record)
    assert reopened.peek() is None
    reopened.close()


def test_system_metrics_are_sampled_when_asked(platform: FakePlatform, tmp_path: Path) -> None:
    pytest.importorskip("psutil")
    run = start(platform.url, tmp_path, log_system_metrics=True, system_metrics_interval=0.05)
    run.log({"loss": 1.0}, step=4)
    time.sleep(0.3)
    run.finish()
    names = {name for name, _, _ in platform.received.points()}
    assert {"host_cpu_utilization", "host_memory_utilization"} <= names
    assert {step for name, step, _ in platform.received.points("host_memory_utilization")} <= {
        0,
        4,
    }


def test_without_a_writable_spool_batches_wait_in_memory(
    platform: FakePlatform, tmp_path: Path
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    run = start(platform.url, not_a_directory)
    run.log({"loss": 1.0})
    assert run.finish() is True
    assert platform.received.points() == [("loss", 0, 1.0)]


def test_replay_of_this_run_only_leaves_other_runs_spooled(tmp_path: Path) -> None:
    down = FakePlatform()
    for run_id in ("mine", "theirs"):
        left = start(down.url, tmp_path, run_id=run_id)
        left.log({run_id: 1.0})
        assert left.finish(timeout=0.3) is False
    down.start()
    try:
        again = start(down.url, tmp_path, run_id="mine", replay_all=False)
        assert again.finish() is True
        assert down.received.points() == [("mine", 0, 1.0)]
        assert [path.parts[-3] for path in pending_segments(tmp_path)] == ["theirs"]
    finally:
        down.stop()


def test_rule_overrides_and_the_host_name_travel_with_the_run(
    platform: FakePlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLDIAG_HOST", "pod-7")
    rules = {"rules": {"hang": {"thresholds": {"floorSeconds": 60}}}}
    run = start(platform.url, tmp_path, monitoring=rules)
    run.log({"loss": 1.0})
    assert run.finish() is True
    assert platform.received.creates[0]["monitoring"] == rules
    assert platform.received.batches[0]["series"][0]["host"] == "pod-7"

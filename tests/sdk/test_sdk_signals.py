"""Lifecycle signals and framework marks against the tiny in-process platform: what
``report_signal`` sends, ``data_wait`` / ``checkpoint`` points, JAX compile events, and the
heartbeat's fingerprint."""

import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax._src import monitoring as jax_monitoring  # what is registered

import mldiag
from mldiag.environment import fingerprint
from mldiag.jax_compile import BACKEND_COMPILE_EVENT
from sdk.fake_platform import FakePlatform

SLACK = 0.5
"""How much longer than asked a sleep may take on a busy 2-core machine."""


def start(platform: FakePlatform, spool: Path, **kwargs: Any) -> mldiag.Run:
    options: dict[str, Any] = {
        "name": "signals",
        "api_url": platform.url,
        "ingestion_url": platform.url,
        "spool_dir": spool,
        "handle_exit": False,
        "flush_interval": 0.05,
        "heartbeat_interval": 0,
        "log_system_metrics": False,
    }
    options.update(kwargs)
    return mldiag.init(**options)


def values(platform: FakePlatform, metric: str) -> list[tuple[int, float]]:
    return [(step, value) for _, step, value in platform.received.points(metric)]


# -- report_signal ---------------------------------------------------------------------------


def test_a_signal_carries_the_process_and_its_last_step(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform, tmp_path, process_index=3)
    run.log({"loss": 1.0}, step=41)
    happened = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert run.report_signal(
        "PROCESS_EXITED", exit_code=137, signal="SIGKILL", reason="oom_killed", time=happened
    )
    assert run.preemption_notice("maintenance", "host maintenance at 12:00") is True
    [exited, notice] = platform.received.signals
    assert exited == {
        "kind": "PROCESS_EXITED",
        "host": run.host,
        "processIndex": 3,
        "pid": os.getpid(),
        "step": 41,
        "time": "2030-01-02T03:04:05+00:00",
        "exitCode": 137,
        "signal": "SIGKILL",
        "reason": "oom_killed",
    }
    assert (notice["kind"], notice["reason"], notice["message"]) == (
        "PREEMPTION_NOTICE",
        "maintenance",
        "host maintenance at 12:00",
    )
    assert abs(datetime.fromisoformat(notice["time"]) - datetime.now(UTC)) < timedelta(minutes=1)
    run.finish()
    # Still possible after finish: a launcher reports its child's exit once the run is over.
    assert run.report_signal(mldiag.SignalKind.PROCESS_EXITED, exit_code=0) is True


def test_texts_are_cut_to_the_contract_never_refused(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform, tmp_path)
    assert run.report_signal(
        "EXCEPTION", error_type="E" * 300, reason="r" * 300, message="m" * 30_000
    )
    [sent] = platform.received.signals
    assert (len(sent["errorType"]), len(sent["reason"]), len(sent["message"])) == (
        200,
        100,
        20_000,
    )
    assert "step" not in sent  # nothing logged yet
    run.finish()


def test_a_busy_platform_gets_the_same_signal_again(platform: FakePlatform, tmp_path: Path) -> None:
    platform.fail_first_signals = 2
    run = start(platform, tmp_path)
    assert run.report_signal("SIGTERM", signal="SIGTERM") is True
    assert platform.received.signal_attempts == 3
    [sent] = platform.received.signals  # one body, so one time: ingestion dedupes retries
    assert sent["kind"] == "SIGTERM"
    run.finish()


def test_refused_unknown_or_unreachable_signals_return_false_without_raising(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform, tmp_path)
    assert run.report_signal("REBOOTED") is False
    assert platform.received.signal_attempts == 0
    platform.signal_status = 400
    assert run.report_signal("SIGTERM") is False
    assert platform.received.signal_attempts == 1  # a refusal is not retried
    run.finish()

    down = FakePlatform()  # never started: its port is closed
    lost = start(down, tmp_path / "down", create_run=False)
    began = time.monotonic()
    assert lost.report_signal("SIGTERM", timeout=0.5) is False
    assert time.monotonic() - began < 0.5 + SLACK
    lost.finish(timeout=0.5)


def test_without_a_run_the_module_level_marks_do_nothing() -> None:
    assert mldiag.current_run() is None
    assert mldiag.preemption_notice("maintenance") is False
    with mldiag.data_wait(), mldiag.checkpoint():
        pass


def test_an_exception_leaving_the_block_reports_its_type_and_fails_the_run_with_it(
    platform: FakePlatform, tmp_path: Path
) -> None:
    with (
        pytest.raises(ValueError, match="bad shard"),
        start(platform, tmp_path, run_id="with-block") as run,
    ):
        run.log({"loss": 1.0})
        raise ValueError("bad shard 7")
    [sent] = platform.received.signals
    assert (sent["kind"], sent["errorType"], sent["message"], sent["step"]) == (
        "EXCEPTION",
        "ValueError",
        "bad shard 7",
        0,
    )
    [(_, _, patch)] = platform.received.patches
    assert patch["runPhase"] == "FAILED"
    assert patch["errorDetails"] == {"message": "ValueError: bad shard 7", "code": "ValueError"}


def test_a_clean_sys_exit_in_the_block_is_no_crash(platform: FakePlatform, tmp_path: Path) -> None:
    with pytest.raises(SystemExit), start(platform, tmp_path):
        sys.exit(0)
    assert platform.received.signals == []


# -- data wait and checkpoints ----------------------------------------------------------------


def test_data_waits_add_up_to_the_next_step_and_checkpoints_record_at_the_current_one(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform, tmp_path)
    run.log({"loss": 1.0}, step=0)
    for _ in range(2):  # two waits feed step 1
        with run.data_wait():
            time.sleep(0.05)
    run.log({"loss": 0.5}, step=1)
    with run.checkpoint():
        time.sleep(0.1)
    with mldiag.data_wait():  # the module-level form, on the current run
        time.sleep(0.02)
    mldiag.metrics.record("loss", 0.4, step=2)  # a new step through record
    with mldiag.checkpoint():
        time.sleep(0.03)
    with run.data_wait():  # waited, but no step followed
        time.sleep(0.02)
    assert run.finish() is True

    waits = values(platform, "data_wait_time")
    assert [step for step, _ in waits] == [1, 2, 2]
    for (_, waited), slept in zip(waits, (0.1, 0.02, 0.02), strict=True):
        assert slept <= waited < slept + SLACK
    saves = values(platform, "checkpoint_time")
    assert [step for step, _ in saves] == [1, 2]
    for (_, blocked), slept in zip(saves, (0.1, 0.03), strict=True):
        assert slept <= blocked < slept + SLACK


def test_a_failed_save_still_records_how_long_it_blocked(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform, tmp_path)
    run.log({"loss": 1.0}, step=5)
    with pytest.raises(OSError, match="disk full"), run.checkpoint():
        time.sleep(0.02)
        raise OSError("disk full")
    run.finish()
    [(step, blocked)] = values(platform, "checkpoint_time")
    assert step == 5 and 0.02 <= blocked < 0.02 + SLACK


# -- JAX compile events ----------------------------------------------------------------------


def test_each_jax_compilation_is_one_compile_time_point(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start(platform, tmp_path)  # this module imported JAX: init watches by itself

    @jax.jit
    def scaled(x: jax.Array) -> jax.Array:
        return x * 2.0 + 1.0

    inputs = [np.ones(size, dtype=np.float32) for size in (2, 3, 3, 4, 2)]
    for step, batch in enumerate(inputs):  # three shapes: three compilations
        scaled(batch).block_until_ready()
        run.log({"loss": float(batch.size)}, step=step)
    assert run.finish() is True
    compiles = values(platform, "compile_time")
    assert [step for step, _ in compiles] == [0, 0, 2]  # at the step current when compiling
    assert all(0 < seconds < 30 for _, seconds in compiles)

    listeners = jax_monitoring.get_event_duration_listeners()
    assert run._compiles._listener not in listeners  # unregistered on finish
    scaled(np.ones(7, dtype=np.float32)).block_until_ready()
    assert len(values(platform, "compile_time")) == 3


def test_jax_is_never_imported_by_init_and_watch_jax_covers_a_later_import(
    platform: FakePlatform, tmp_path: Path
) -> None:
    script = f"""
    import sys
    import mldiag
    run = mldiag.init(
        run_id="lazy-jax", api_url={platform.url!r}, ingestion_url={platform.url!r},
        spool_dir={str(tmp_path)!r}, handle_exit=False, heartbeat_interval=0,
        log_system_metrics=False, flush_interval=0.05,
    )
    assert "jax" not in sys.modules, "init imported jax"
    import jax, numpy as np
    f = jax.jit(lambda x: x + 1)
    f(np.ones(2, np.float32)).block_until_ready()  # not watched yet
    assert run.watch_jax() and run.watch_jax()  # idempotent
    run.log({{"loss": 1.0}}, step=9)
    f(np.ones(3, np.float32)).block_until_ready()
    assert run.finish()
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert values(platform, "compile_time")[0][0] == 9
    assert len(values(platform, "compile_time")) == 1


def test_a_listener_that_breaks_never_reaches_the_compiling_code() -> None:
    from mldiag.jax_compile import CompileWatcher  # noqa: PLC0415  # the unit under test

    def broken(seconds: float) -> None:
        raise RuntimeError(f"no room for {seconds}")

    watcher = CompileWatcher(broken)
    assert watcher.start() is True
    try:
        jax.monitoring.record_event_duration_secs(BACKEND_COMPILE_EVENT, 0.5)
    finally:
        watcher.stop()
    assert watcher.watching is False


# -- fingerprint -----------------------------------------------------------------------------


def test_the_fingerprint_is_short_and_ignores_flag_order(tmp_path: Path) -> None:
    packages = [("jax", "0.10.2"), ("jaxlib", "0.10.2"), ("torch", "2.9.0")]
    env = {"XLA_FLAGS": "--xla_a=1 --xla_b=2", "LIBTPU_INIT_ARGS": "--x"}
    found = fingerprint(env, packages, cwd=tmp_path)  # not a git checkout
    assert found["jax_version"] == "0.10.2" and found["torch_version"] == "2.9.0"
    assert found["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert len(found["xla_flags_sha256"]) == 16 and "libtpu_init_args_sha256" in found
    assert len(found["packages_sha256"]) == 64 and "git_commit" not in found
    swapped = fingerprint({**env, "XLA_FLAGS": "--xla_b=2  --xla_a=1"}, packages, cwd=tmp_path)
    assert swapped == found
    changed = fingerprint({**env, "XLA_FLAGS": "--xla_a=1"}, packages, cwd=tmp_path)
    assert changed["xla_flags_sha256"] != found["xla_flags_sha256"]
    assert "xla_flags_sha256" not in fingerprint({}, packages, cwd=tmp_path)
    assert len(found) <= 64 and all(len(value) <= 500 for value in found.values())


def test_heartbeats_of_two_processes_of_one_environment_carry_one_fingerprint(
    platform: FakePlatform, tmp_path: Path
) -> None:
    script = f"""
    import sys, time
    import mldiag
    run = mldiag.init(
        run_id="fingerprinted", api_url={platform.url!r}, ingestion_url={platform.url!r},
        spool_dir={str(tmp_path)!r}, handle_exit=False, heartbeat_interval=0.2,
        log_system_metrics=False, process_index=int(sys.argv[1]),
    )
    time.sleep(1.5)
    run.finish()
    """
    children = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(index)], cwd=tmp_path)
        for index in (0, 1)
    ]
    assert [child.wait(timeout=60) for child in children] == [0, 0]
    beats = platform.received.heartbeats
    by_process = {beat["processIndex"]: beat["fingerprint"] for beat in beats}
    assert set(by_process) == {0, 1}
    assert all("fingerprint" in beat for beat in beats)  # collected before the first beat
    assert by_process[0] == by_process[1]
    assert by_process[0]["jax_version"] == jax.__version__
    assert by_process[0]["python_version"] == ".".join(map(str, sys.version_info[:3]))

"""On-demand profiling: the workload's ``jax.profiler`` server starts on the configured port,
registers itself as the run's profiler target, and answers a real capture client (XProf's,
the one the provisioner uses) with an xplane; a programmatic trace that collides with the
capture fails alone and leaves the next one working."""

import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mldiag.profiler_server import (
    DEFAULT_PROFILER_PORT,
    advertised_address,
    resolve_profiler_port,
    start_profiler_server,
)
from sdk.fake_platform import FakePlatform

WORKLOAD = """
import os, sys, time
from pathlib import Path
import mldiag

@mldiag.xprof()
def never_called() -> None: ...

assert "jax" not in sys.modules, "building a profiler imported jax"
run = mldiag.machinelearning_run(
    "on-demand", base_url=os.environ["URL"], on_demand_xprof=True, run_id="on-demand",
    ingestion_url=os.environ["URL"], spool_dir=os.environ["SPOOL"], handle_exit=False,
    heartbeat_interval=0,
)
import jax, jax.numpy as jnp
x = jnp.ones((64, 64))
control = Path(os.environ["CONTROL"])
(control / "ready").write_text("1")
while not (control / "stop").exists():
    if (control / "trace-now").exists():  # while a capture runs
        (control / "trace-now").unlink()
        with mldiag.xprof(session_id="collides"):
            time.sleep(0.2)
        while not (control / "captured").exists():
            time.sleep(0.01)
        with mldiag.xprof(session_id="after"):
            time.sleep(0.05)
        (control / "traced").write_text("1")
    x = jnp.tanh(x @ x.T) * 0.5
    x.block_until_ready()
    time.sleep(0.01)
run.finish()
"""


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_profiler_server_registers_and_serves_a_real_capture(
    platform: FakePlatform, tmp_path: Path
) -> None:
    from xprof.convert import _pywrap_profiler_plugin  # noqa: PLC0415  # heavy; this test only

    control = tmp_path / "control"
    control.mkdir()
    env = {
        **os.environ,
        "URL": platform.url,
        "SPOOL": str(tmp_path / "spool"),
        "CONTROL": str(control),
        "MLDIAG_PROFILER_PORT": "0",  # a free port, over on_demand_xprof's 9999
        "MLDIAG_HOST": "host-od",
        "MLDIAG_ARTIFACTS_ROOT": f"file://{tmp_path / 'artifacts'}",
        "JAX_PLATFORMS": "cpu",
        "TMPDIR": str(tmp_path),  # where JAX traces before the upload
    }
    env.pop("MLDIAG_PROFILER_ADVERTISE_HOST", None)
    workload = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WORKLOAD)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(
            lambda: (control / "ready").exists() or workload.poll() is not None, "the workload"
        )
        assert workload.poll() is None, workload.communicate()[1][-3000:]
        _wait_for(lambda: platform.received.targets, "the target registration", timeout=20)
        [(run_id, target)] = platform.received.targets
        assert run_id == "on-demand"
        host, _, port = target["address"].rpartition(":")
        assert host == "127.0.0.1"  # the route to a registry on 127.0.0.1
        assert port.isdigit()
        assert int(port) != 9999
        assert target == {
            "host": "host-od",
            "processIndex": 0,
            "address": target["address"],
            "pid": workload.pid,
        }

        logdir = tmp_path / "captured"
        options = {
            "session_id": "captured",
            "host_tracer_level": 2,
            "device_tracer_level": 1,
            "python_tracer_level": 0,
        }
        capture = threading.Thread(
            target=_pywrap_profiler_plugin.trace,
            args=(target["address"], str(logdir), "", True, 1500, 3, options),
        )
        capture.start()
        time.sleep(0.3)
        (control / "trace-now").write_text("1")
        capture.join(timeout=30)
        (control / "captured").write_text("1")
        written = list((logdir / "plugins" / "profile" / "captured").glob("*.xplane.pb"))
        assert len(written) == 1
        assert written[0].stat().st_size > 1000
        _wait_for(
            lambda: (control / "traced").exists() or workload.poll() is not None,
            "the programmatic traces",
        )
    finally:
        (control / "stop").write_text("1")
        try:
            workload.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            workload.kill()
            workload.communicate()
    assert workload.returncode == 0
    outcome = {(r["sessionId"], r["phase"]): r for r in platform.received.reports()}
    assert "ALREADY_EXISTS" in outcome["collides", "FAILED"]["error"]
    assert ("after", "SUCCEEDED") in outcome  # JAX was not left thinking a trace runs


def test_the_port_comes_from_the_argument_the_environment_or_on_demand() -> None:
    assert resolve_profiler_port(None, env={}) is None
    assert resolve_profiler_port(None, on_demand=True, env={}) == DEFAULT_PROFILER_PORT == 9999
    assert resolve_profiler_port(None, on_demand=True, env={"MLDIAG_PROFILER_PORT": "7000"}) == 7000
    assert resolve_profiler_port(8000, env={"MLDIAG_PROFILER_PORT": "7000"}) == 8000
    assert resolve_profiler_port(0, env={}) == 0  # a free port, picked at start
    with pytest.raises(ValueError, match="MLDIAG_PROFILER_PORT"):
        resolve_profiler_port(None, env={"MLDIAG_PROFILER_PORT": "many"})
    with pytest.raises(ValueError, match="between 0 and 65535"):
        resolve_profiler_port(70000, env={})


def test_the_advertised_address() -> None:
    api = "http://127.0.0.1:8080"
    assert advertised_address(9999, api, env={}) == "127.0.0.1:9999"
    named = {"MLDIAG_PROFILER_ADVERTISE_HOST": "worker-3.cluster"}
    assert advertised_address(9999, api, env=named) == "worker-3.cluster:9999"
    v6 = {"MLDIAG_PROFILER_ADVERTISE_HOST": "fd00::3"}
    assert advertised_address(9999, api, env=v6) == "[fd00::3]:9999"
    # No route to the registry's host: this machine's name (or loopback) all the same.
    assert advertised_address(1, "http://no-such-host.invalid", env={}).endswith(":1")


def test_a_busy_port_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="mldiag"):
            assert start_profiler_server(port) is None
    assert "mldiag.profiler.port_busy" in caplog.text

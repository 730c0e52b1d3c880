"""How a run ends when its process does: normal exit, uncaught exception, SIGTERM (and the
lifecycle signal each of the last two reports)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sdk.fake_platform import FakePlatform

PRELUDE = """
import os, signal, sys, time
import mldiag
"""

INIT = """
run = mldiag.init(
    name="child", run_id="child-run", api_url=os.environ["URL"],
    ingestion_url=os.environ["URL"], spool_dir=os.environ["SPOOL"], flush_interval=0.05,
    log_system_metrics=False,  # exact points below; contention would come every second
)
run.log({"loss": 1.0})
"""


def run_child(
    platform: FakePlatform, tmp_path: Path, body: str, *, terminate: bool = False
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "URL": platform.url, "SPOOL": str(tmp_path / "spool")}
    ready = tmp_path / "ready"
    env["READY"] = str(ready)
    child = subprocess.Popen(
        [sys.executable, str(script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if terminate:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=30)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def phases(platform: FakePlatform) -> list[tuple[str, str]]:
    return [
        (body["runPhase"], body["errorDetails"]["message"])
        for _, _, body in platform.received.patches
    ]


def codes(platform: FakePlatform) -> list[str | None]:
    return [body["errorDetails"].get("code") for _, _, body in platform.received.patches]


def signals(platform: FakePlatform) -> list[tuple[str, str | None, str | None]]:
    return [
        (signal["kind"], signal.get("signal"), signal.get("errorType"))
        for signal in platform.received.signals
    ]


def test_a_normal_exit_completes_the_run(platform: FakePlatform, tmp_path: Path) -> None:
    result = run_child(platform, tmp_path, INIT)
    assert result.returncode == 0, result.stderr
    assert phases(platform) == [("COMPLETED", "")]
    assert signals(platform) == []
    assert platform.received.points() == [("loss", 0, 1.0)]


def test_an_uncaught_exception_fails_the_run(platform: FakePlatform, tmp_path: Path) -> None:
    result = run_child(platform, tmp_path, INIT + "raise RuntimeError('diverged')\n")
    assert result.returncode == 1
    assert "RuntimeError: diverged" in result.stderr  # the previous excepthook still ran
    assert phases(platform) == [("FAILED", "RuntimeError: diverged")]
    assert codes(platform) == ["RuntimeError"]
    assert platform.received.points() == [("loss", 0, 1.0)]
    assert signals(platform) == [("EXCEPTION", None, "RuntimeError")]
    [signal] = platform.received.signals
    assert (signal["message"], signal["step"], signal["processIndex"]) == ("diverged", 0, 0)
    assert signal["pid"] not in (0, os.getpid())  # the child's


def test_an_exception_of_a_library_is_named_with_its_module(
    platform: FakePlatform, tmp_path: Path
) -> None:
    body = INIT + "import json\njson.loads('{not json')\n"
    result = run_child(platform, tmp_path, body)
    assert result.returncode == 1
    assert signals(platform) == [("EXCEPTION", None, "json.decoder.JSONDecodeError")]
    assert codes(platform) == ["json.decoder.JSONDecodeError"]


def test_sigterm_fails_the_run_and_calls_the_previous_handler(
    platform: FakePlatform, tmp_path: Path
) -> None:
    marker = tmp_path / "handled"
    body = f"""
    def handler(signum, frame):
        open({str(marker)!r}, "w").write("yes")
        sys.exit(3)
    signal.signal(signal.SIGTERM, handler)
    {INIT.strip().replace(chr(10), chr(10) + "    ")}
    open(os.environ["READY"], "w").close()
    time.sleep(30)
    """
    result = run_child(platform, tmp_path, body, terminate=True)
    assert result.returncode == 3, result.stderr
    assert marker.read_text() == "yes"
    assert phases(platform) == [("FAILED", "terminated by signal SIGTERM")]
    assert codes(platform) == ["SIGTERM"]
    assert signals(platform) == [("SIGTERM", "SIGTERM", None)]  # sys.exit(3): no EXCEPTION
    assert platform.received.points() == [("loss", 0, 1.0)]


def test_sigterm_with_the_default_handler_still_kills_the_process(
    platform: FakePlatform, tmp_path: Path
) -> None:
    body = INIT + 'open(os.environ["READY"], "w").close()\ntime.sleep(30)\n'
    result = run_child(platform, tmp_path, body, terminate=True)
    assert result.returncode == -signal.SIGTERM
    assert phases(platform) == [("FAILED", "terminated by signal SIGTERM")]
    assert codes(platform) == ["SIGTERM"]
    assert signals(platform) == [("SIGTERM", "SIGTERM", None)]
    assert platform.received.signals[0]["step"] == 0
    assert platform.received.points() == [("loss", 0, 1.0)]


def test_exit_with_the_platform_down_is_bounded_and_keeps_the_spool(tmp_path: Path) -> None:
    down = FakePlatform()
    body = INIT.replace("flush_interval=0.05,", "flush_interval=0.05, shutdown_timeout=1.0,")
    began = time.monotonic()
    result = run_child(down, tmp_path, body)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began < 8
    assert list((tmp_path / "spool").glob("*/*/*.seg"))


def test_a_crash_with_the_platform_down_is_bounded_too(tmp_path: Path) -> None:
    down = FakePlatform()  # the EXCEPTION signal (2 s at most) and the finish (1 s)
    body = INIT.replace("flush_interval=0.05,", "flush_interval=0.05, shutdown_timeout=1.0,")
    began = time.monotonic()
    result = run_child(down, tmp_path, body + "raise RuntimeError('diverged')\n")
    assert result.returncode == 1
    assert "RuntimeError: diverged" in result.stderr
    assert time.monotonic() - began < 10


def test_a_forked_child_neither_records_nor_ends_the_run(
    platform: FakePlatform, tmp_path: Path
) -> None:
    body = (
        INIT
        + """
pid = os.fork()
if pid == 0:
    run.log({"from_child": 1.0})
    sys.exit(0)  # a normal exit of the child runs its atexit hooks
os.waitpid(pid, 0)
run.log({"loss": 2.0})
"""
    )
    result = run_child(platform, tmp_path, body)
    assert result.returncode == 0, result.stderr
    assert phases(platform) == [("COMPLETED", "")]
    assert platform.received.points() == [("loss", 0, 1.0), ("loss", 1, 2.0)]

"""Programmatic traces with real JAX on CPU: ``mldiag.xprof()`` as start/stop, a ``with``
block and a decorator, landing as ``<root>/<run>/plugins/profile/<session>/<host>.xplane.pb``
with the session reported to the (fake) registry; failures reported, never raised."""

import logging
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import mldiag
from mldiag.xprof import XProfError, decode_session_id, encode_session_id, new_session_id
from sdk.fake_platform import FakePlatform
from support import free_port

HOST = "host-a"


@pytest.fixture(autouse=True)
def _host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLDIAG_HOST", HOST)
    # JAX traces into temporary directories; those of failed uploads are kept on purpose.
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.delenv("MLDIAG_ARTIFACTS_ROOT", raising=False)
    monkeypatch.delenv("MLDIAG_PROFILER_PORT", raising=False)


def start_run(platform: FakePlatform, tmp_path: Path, **kwargs: Any) -> mldiag.Run:
    options: dict[str, Any] = {
        "name": "traced",
        "run_id": "traced-run",
        "api_url": platform.url,
        "ingestion_url": platform.url,
        "spool_dir": tmp_path / "spool",
        "handle_exit": False,
        "heartbeat_interval": 0,
        "log_system_metrics": False,
        "gcs_path": f"file://{tmp_path / 'artifacts'}",
    }
    options.update(kwargs)
    return mldiag.init(**options)


def work() -> None:
    """A little device work to trace (about 0.1 s)."""
    x = jnp.ones((64, 64))
    for _ in range(20):
        x = jnp.tanh(x @ x.T) * 0.5
    x.block_until_ready()


def xplanes(root: Path) -> list[str]:
    """The xplane files under ``root``, relative to it."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.xplane.pb"))


def phases(platform: FakePlatform, session: str) -> list[str]:
    return [r["phase"] for r in platform.received.reports() if r["sessionId"] == session]


def test_start_stop_uploads_the_xplane_and_reports_active_then_succeeded(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path)
    prof = mldiag.xprof()
    session = prof.start()
    work()
    prof.stop()
    assert run.finish()  # waits for the upload and the reports

    assert re.fullmatch(r"trace-\d{8}-\d{6}-[0-9a-f]{6}", session)
    root = tmp_path / "artifacts"
    key = f"traced-run/plugins/profile/{session}/{HOST}.xplane.pb"
    assert xplanes(root) == [key]
    assert (root / key).stat().st_size > 1000
    assert not list(root.rglob(".tmp-*"))  # written atomically
    active, succeeded = platform.received.reports()
    assert [run for run, _ in platform.received.session_reports] == ["traced-run"] * 2
    levels = {"hostTracerLevel": 2, "deviceTracerLevel": 1, "pythonTracerLevel": 0}
    assert active == {
        "sessionId": session,
        "kind": "PROGRAMMATIC",
        "host": HOST,
        "phase": "ACTIVE",
        "tracerLevels": levels,
        "startTime": active["startTime"],
        "updateTime": active["startTime"],
    }
    folder = f"file://{root.resolve()}/traced-run/plugins/profile/{session}"
    assert succeeded == {
        "sessionId": session,
        "kind": "PROGRAMMATIC",
        "host": HOST,
        "phase": "SUCCEEDED",
        "tracerLevels": levels,
        "startTime": active["startTime"],
        "endTime": succeeded["endTime"],
        "durationSeconds": succeeded["durationSeconds"],
        "fileUri": f"{folder}/{HOST}.xplane.pb",
        "sizeBytes": (root / key).stat().st_size,
        "storageFolderUri": folder,
        "updateTime": succeeded["updateTime"],
    }
    assert 0 < succeeded["durationSeconds"] < 30
    assert succeeded["startTime"] < succeeded["endTime"] <= succeeded["updateTime"]


def test_a_with_block_and_a_decorator_trace_one_session_each(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path)
    with mldiag.xprof(python_tracer_level=1) as prof:
        work()
    first = prof.session_id

    traced = mldiag.xprof(session_id="decorated")

    @traced
    def step(n: int) -> int:
        work()
        return n + 1

    assert step(1) == 2
    assert step.__name__ == "step"
    assert traced.session_id == "decorated"
    assert run.finish()

    assert first is not None
    assert xplanes(tmp_path / "artifacts") == sorted(
        [
            f"traced-run/plugins/profile/{first}/{HOST}.xplane.pb",
            f"traced-run/plugins/profile/decorated/{HOST}.xplane.pb",
        ]
    )
    assert phases(platform, first) == ["ACTIVE", "SUCCEEDED"]
    assert phases(platform, "decorated") == ["ACTIVE", "SUCCEEDED"]
    python_levels = {r["tracerLevels"]["pythonTracerLevel"] for r in platform.received.reports()}
    assert python_levels == {0, 1}


def test_traces_in_a_row_get_their_own_sessions_even_within_a_second(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path)
    prof = mldiag.xprof(run)
    sessions = []
    for _ in range(2):
        sessions.append(prof.start())
        work()
        prof.stop()
    named = prof.start("named-one")
    prof.stop()
    assert run.finish()
    assert sessions[0] != sessions[1]
    assert named == "named-one"
    root = tmp_path / "artifacts"
    assert xplanes(root) == sorted(
        f"traced-run/plugins/profile/{s}/{HOST}.xplane.pb" for s in [*sessions, "named-one"]
    )
    assert len(platform.received.reports("SUCCEEDED")) == 3


def test_a_session_id_traced_already_is_refused(platform: FakePlatform, tmp_path: Path) -> None:
    # A second trace into the same session would overwrite the host's file under a session
    # that already says SUCCEEDED (and whose caches were warmed from the first one).
    run = start_run(platform, tmp_path)
    with mldiag.xprof(run, session_id="once"):
        work()
    with pytest.raises(XProfError, match="traced by this process already"):
        mldiag.xprof(run).start("once")
    assert run.finish()
    assert len(platform.received.reports("SUCCEEDED")) == 1


def test_misuse_raises(platform: FakePlatform, tmp_path: Path) -> None:
    with pytest.raises(XProfError, match="no run"):
        mldiag.xprof().start()  # before init
    run = start_run(platform, tmp_path)
    prof = mldiag.xprof()
    with pytest.raises(XProfError, match="without start"):
        prof.stop()
    prof.start()
    try:
        with pytest.raises(XProfError, match="already tracing"):
            prof.start()
        with pytest.raises(XProfError, match="already running in this process"):
            mldiag.xprof().start()
        with pytest.raises(RuntimeError):  # JAX's one trace is ours
            jax.profiler.start_trace(str(tmp_path / "other"))
    finally:
        prof.stop()
    with pytest.raises(ValueError, match="invalid session id"):
        mldiag.xprof(session_id="../escape")
    with pytest.raises(ValueError, match="invalid session id"):
        prof.start("has space")
    with pytest.raises(ValueError, match="host_tracer_level"):
        mldiag.xprof(host_tracer_level=4)
    assert run.finish()


def test_a_trace_jax_runs_outside_mldiag_is_a_clear_error(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path)
    temporary = Path(tempfile.gettempdir())
    before = set(temporary.glob("mldiag-xprof-*"))
    jax.profiler.start_trace(str(tmp_path / "outside"))
    try:
        with pytest.raises(XProfError, match="outside mldiag"):
            mldiag.xprof().start()
    finally:
        jax.profiler.stop_trace()
    assert run.finish()
    assert platform.received.session_reports == []
    assert set(temporary.glob("mldiag-xprof-*")) == before  # its directory was removed


def test_a_failed_upload_is_reported_failed_and_never_raised(
    platform: FakePlatform, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the root should be")
    run = start_run(platform, tmp_path, gcs_path=f"file://{blocker}")
    with caplog.at_level(logging.ERROR, logger="mldiag"), mldiag.xprof() as prof:
        work()
    assert run.finish()
    assert phases(platform, str(prof.session_id)) == ["ACTIVE", "FAILED"]
    failed = platform.received.reports("FAILED")[0]
    assert failed["error"].startswith(("NotADirectoryError", "FileExistsError"))
    assert failed["durationSeconds"] > 0
    assert "fileUri" not in failed
    assert "mldiag.xprof.upload_failed" in caplog.text


def test_without_any_artifacts_root_the_session_fails_with_the_way_out(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path, gcs_path="")
    with mldiag.xprof():
        pass
    assert run.finish()
    [failed] = platform.received.reports("FAILED")
    assert "no artifacts root" in failed["error"]
    assert "MLDIAG_ARTIFACTS_ROOT" in failed["error"]
    assert platform.received.run_reads >= 1  # the registry was asked first


def test_the_root_comes_from_the_run_resource_then_the_environment(
    platform: FakePlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_registry = tmp_path / "registry-root"
    platform.artifacts_root = f"file://{from_registry}"
    monkeypatch.setenv("MLDIAG_ARTIFACTS_ROOT", f"file://{tmp_path / 'env-root'}")
    run = start_run(platform, tmp_path, gcs_path="", run_id="from-registry")
    run.flush(5.0)  # process 0 has created the run by then
    with mldiag.xprof() as first:
        pass
    assert run.finish()
    assert xplanes(from_registry) == [
        f"from-registry/plugins/profile/{first.session_id}/{HOST}.xplane.pb"
    ]

    platform.artifacts_root = ""
    run = start_run(platform, tmp_path, gcs_path="", run_id="from-env", create_run=False)
    with mldiag.xprof() as second:
        pass
    assert run.finish()
    assert xplanes(tmp_path / "env-root") == [
        f"from-env/plugins/profile/{second.session_id}/{HOST}.xplane.pb"
    ]


def test_processes_left_out_of_the_list_trace_nothing(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path, process_index=1)
    with mldiag.xprof(process_index_list=[0]) as left_out:
        work()
    assert left_out.session_id is not None  # it still took part in naming the session
    with mldiag.xprof(process_index_list=[1, 2]) as included:
        work()
    assert run.finish()
    assert xplanes(tmp_path / "artifacts") == [
        f"traced-run/plugins/profile/{included.session_id}/{HOST}.xplane.pb"
    ]
    assert {r["sessionId"] for r in platform.received.reports()} == {included.session_id}


def test_finish_stops_a_trace_left_running_and_waits_for_its_upload(
    platform: FakePlatform, tmp_path: Path
) -> None:
    run = start_run(platform, tmp_path)
    prof = mldiag.xprof()
    session = prof.start()
    work()
    assert run.finish()
    assert not prof.active
    assert phases(platform, session) == ["ACTIVE", "SUCCEEDED"]
    assert len(xplanes(tmp_path / "artifacts")) == 1


def test_registry_failures_are_logged_not_raised(
    platform: FakePlatform, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    platform.report_status = 400  # refused for good: no retries
    run = start_run(platform, tmp_path)
    with caplog.at_level(logging.WARNING, logger="mldiag"), mldiag.xprof():
        work()
    assert run.finish()
    assert len(xplanes(tmp_path / "artifacts")) == 1  # the profile landed all the same
    assert "mldiag.xprof.report_failed" in caplog.text

    nothing_there = f"http://127.0.0.1:{free_port()}"
    run = start_run(platform, tmp_path, api_url=nothing_there, run_id="offline", create_run=False)
    with mldiag.xprof():  # never blocks nor raises: the reports are retried elsewhere
        pass
    began = time.monotonic()
    run.finish(timeout=1.0)  # gives up waiting for the retried reports in time
    assert time.monotonic() - began < 3


def test_reports_wait_for_the_run_to_exist(platform: FakePlatform, tmp_path: Path) -> None:
    platform.fail_first_reports = 2  # 404: process 0 has not created the run yet
    run = start_run(platform, tmp_path, process_index=1)
    with mldiag.xprof() as prof:
        pass
    assert run.finish()
    assert phases(platform, str(prof.session_id)) == ["ACTIVE", "SUCCEEDED"]


def test_session_ids_travel_as_fixed_size_arrays() -> None:
    session = new_session_id()
    encoded = encode_session_id(session)
    assert encoded.shape == (128,)
    assert decode_session_id(encoded) == session
    assert decode_session_id(encode_session_id("")) == ""


@pytest.fixture
def gcs_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from gcp_storage_emulator.server import create_server  # noqa: PLC0415

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="profiles")
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield "profiles"
    finally:
        server.stop()


def test_a_gs_root_uploads_to_the_bucket(
    platform: FakePlatform, tmp_path: Path, gcs_bucket: str
) -> None:
    from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415
    from google.cloud import storage  # noqa: PLC0415

    run = start_run(platform, tmp_path, gcs_path=f"gs://{gcs_bucket}/team/runs")
    with mldiag.xprof(session_id="on-gcs"):
        work()
    assert run.finish()
    [succeeded] = platform.received.reports("SUCCEEDED")
    name = f"team/runs/traced-run/plugins/profile/on-gcs/{HOST}.xplane.pb"
    assert succeeded["fileUri"] == f"gs://{gcs_bucket}/{name}"
    assert (
        succeeded["storageFolderUri"]
        == f"gs://{gcs_bucket}/team/runs/traced-run/plugins/profile/on-gcs"
    )
    client = storage.Client(project="test", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    data = client.bucket(gcs_bucket).blob(name).download_as_bytes()
    assert len(data) == succeeded["sizeBytes"] > 1000

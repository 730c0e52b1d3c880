"""MLDIAG_MODE: how the mode is read, what ``disabled`` leaves undone (threads, sockets,
files), and what ``offline`` writes instead of sending."""

import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mldiag
from mldiag.config import Mode, ModeError, resolve_mode
from mldiag.encoding import decode_body
from mldiag.offline import MANIFEST, offline_root
from mldiag.spool import Spool
from sdk.fake_platform import FakePlatform


@pytest.fixture(autouse=True)
def _no_current_run() -> Iterator[None]:
    yield
    mldiag.finish()


def test_mode_is_online_unless_said_otherwise() -> None:
    assert resolve_mode(None, {}) is Mode.ONLINE
    assert resolve_mode(None, {"MLDIAG_MODE": " Offline "}) is Mode.OFFLINE
    assert resolve_mode("disabled", {"MLDIAG_MODE": "offline"}) is Mode.DISABLED  # argument wins
    assert resolve_mode(None, {"MLDIAG_MODE": ""}) is Mode.ONLINE


def test_a_bad_mode_names_the_allowed_ones() -> None:
    with pytest.raises(ModeError) as raised:
        resolve_mode(None, {"MLDIAG_MODE": "dryrun"})
    assert raised.value.code == "invalid_mode"
    assert "MLDIAG_MODE must be one of online, offline, disabled, not 'dryrun'" in str(raised.value)
    with pytest.raises(ModeError, match="mode must be one of"):
        mldiag.init(name="x", mode="quiet")


def test_disabled_starts_no_thread_opens_no_socket_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLDIAG_MODE", "disabled")
    monkeypatch.setenv("MLDIAG_SPOOL_DIR", str(tmp_path / "spool"))
    sockets: list[Any] = []
    real_socket = socket.socket

    class Watched(real_socket):  # type: ignore[misc]  # a subclass that counts creations
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            sockets.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(socket, "socket", Watched)
    threads_before = set(threading.enumerate())

    handler = mldiag.LogHandler()
    program = logging.getLogger("a-disabled-program")
    program.addHandler(handler)
    run = mldiag.init(name="ci", config={"lr": 0.1}, api_url="http://127.0.0.1:9")
    assert run.mode is Mode.DISABLED
    assert mldiag.current_run() is run
    program.warning("a log line a disabled run must not ship")
    handler.flush()
    program.removeHandler(handler)
    handler.close()
    for step in range(5):
        mldiag.log({"loss": 1.0 / (step + 1)})
    mldiag.metrics.record("loss", 0.5)
    run.record("accuracy", 0.9, step=3)
    with mldiag.data_wait(), run.checkpoint():
        pass
    with mldiag.xprof() as profiler:  # traces nothing, and never asks JAX
        pass
    assert profiler.session_id is not None
    assert not profiler.active
    assert run.step == 5
    assert run.flush() is True
    assert run.report_signal("EXCEPTION") is False
    assert mldiag.finish() is True

    assert set(threading.enumerate()) == threads_before
    assert sockets == []
    assert not (tmp_path / "spool").exists()
    assert mldiag.current_run() is None


def test_disabled_run_as_a_context_manager_swallows_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLDIAG_MODE", "disabled")
    with pytest.raises(ZeroDivisionError), mldiag.init(name="nb") as run:
        run.log({"loss": 1.0})
        _ = 1 / 0
    assert mldiag.current_run() is None


def _batches(directory: Path, run_id: str) -> list[dict[str, Any]]:
    bodies = []
    for writer in sorted(path for path in directory.iterdir() if path.is_dir()):
        spool = Spool(writer, run_id)
        bodies += [decode_body(record.payload) for record in spool.records()]
        spool.close()
    return bodies


def test_offline_writes_manifest_and_batches_and_sends_nothing(tmp_path: Path) -> None:
    # Port 9 (discard) answers nothing: a request would show up as a warning, not data.
    run = mldiag.init(
        name="offline-unit",
        run_id="offline-unit",
        config={"optimizer": {"name": "adam", "betas": [0.9, 0.99]}},
        project="vision",
        location="us-central1",
        mode="offline",
        api_url="http://127.0.0.1:9",
        spool_dir=tmp_path,
        handle_exit=False,
        log_system_metrics=False,
        batch_points=4,
        flush_interval=0.05,
    )
    assert run.mode is Mode.OFFLINE
    for step in range(10):
        run.log({"loss": float(step), "lr": 0.1}, step=step)
    assert run.finish("FAILED", error="diverged", error_code="ValueError") is True

    directory = offline_root(tmp_path) / "offline-unit"
    manifest = json.loads((directory / MANIFEST).read_text())
    assert manifest["runId"] == "offline-unit"
    assert (manifest["project"], manifest["location"]) == ("vision", "us-central1")
    assert manifest["configs"]["userConfigs"] == {
        "optimizer": {"name": "adam", "betas": [0.9, 0.99]}
    }
    assert "python_version" in manifest["configs"]["softwareConfigs"]
    assert manifest["phase"] == "FAILED"
    assert manifest["errorDetails"] == {"message": "diverged", "code": "ValueError"}
    assert manifest["syncedTime"] is None

    bodies = _batches(directory, "offline-unit")
    assert all(body["batchId"] for body in bodies)
    steps = sorted(
        step
        for body in bodies
        for series in body["series"]
        if series["name"] == "loss"
        for step in series["steps"]
    )
    assert steps == list(range(10))
    assert len({body["batchId"] for body in bodies}) == len(bodies) > 1
    assert not (tmp_path / "offline-unit").exists()  # not where online replays look


def test_an_online_run_never_replays_an_offline_runs_batches(
    platform: FakePlatform, tmp_path: Path
) -> None:
    offline = mldiag.init(
        run_id="kept-for-sync",
        mode="offline",
        spool_dir=tmp_path,
        handle_exit=False,
        log_system_metrics=False,
    )
    offline.log({"offline_loss": 1.0})
    offline.finish()
    online = mldiag.init(
        run_id="online-after",
        api_url=platform.url,
        ingestion_url=platform.url,
        spool_dir=tmp_path,
        replay_all=True,
        handle_exit=False,
        log_system_metrics=False,
        flush_interval=0.05,
    )
    online.log({"loss": 1.0})
    assert online.finish() is True
    assert platform.received.points("loss") == [("loss", 0, 1.0)]
    assert platform.received.points("offline_loss") == []
    assert len(_batches(offline_root(tmp_path) / "kept-for-sync", "kept-for-sync")) == 1

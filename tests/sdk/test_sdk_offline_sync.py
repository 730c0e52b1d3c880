"""``init(project=, location=, config=)`` and offline runs synced later, against the real
run-registry and ingestion (real NATS and PostgreSQL): the run lands in its project, and a
sync cut off half-way then run again stores every point exactly once."""

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import mldiag
from mldiag.cli import main
from mldiag.config import Settings
from mldiag.offline import MANIFEST, SyncError, offline_root, read_manifest, sync_run

pytestmark = pytest.mark.connected


def _get(url: str) -> httpx.Response:
    return httpx.get(url, headers={"Authorization": f"Bearer {os.environ['MLDIAG_TOKEN']}"})


def _points(run_url: str, metric: str, expected: int) -> list[dict[str, Any]]:
    """The metric's points once ``expected`` are stored (or what is there after 20 s), and
    a little longer: a duplicate would arrive after the count is first reached."""
    deadline = time.monotonic() + 20
    points: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        response = _get(f"{run_url}/metrics/{metric}?pageSize=1000")
        points = response.json().get("points", []) if response.status_code == 200 else []
        if len(points) >= expected:
            time.sleep(0.5)
            return list(_get(f"{run_url}/metrics/{metric}?pageSize=1000").json()["points"])
        time.sleep(0.1)
    return points


def test_project_location_and_config_place_and_describe_the_run(
    platform_urls: tuple[str, str], tmp_path: Path
) -> None:
    api_url, ingestion_url = platform_urls
    config = {"optimizer": {"name": "adam", "betas": [0.9, 0.99]}, "lr": 3e-4}
    run = mldiag.init(
        name="placed",
        run_id="placed-run",
        config=config,
        project="vision",
        location="us-central1",
        api_url=api_url,
        ingestion_url=ingestion_url,
        spool_dir=tmp_path,
        handle_exit=False,
        log_system_metrics=False,
        flush_interval=0.05,
    )
    mldiag.log({"loss": 1.0})
    assert mldiag.finish() is True

    placed = _get(
        f"{api_url}/v1/projects/vision/locations/us-central1/machineLearningRuns/placed-run"
    )
    assert placed.status_code == 200, placed.text
    body = placed.json()
    assert body["name"] == "projects/vision/locations/us-central1/machineLearningRuns/placed-run"
    assert body["configs"]["userConfigs"] == config
    assert body["runPhase"] == "COMPLETED"
    assert _get(f"{api_url}/v1/machineLearningRuns/{run.run_id}").status_code == 404


class CutOff(httpx.BaseTransport):
    """The network as it is, until ``writes`` metric batches have gone: then it is down."""

    def __init__(self, writes: int) -> None:
        self._inner = httpx.HTTPTransport()
        self._writes_left = writes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/metrics:write"):
            if self._writes_left == 0:
                raise httpx.ConnectError("cut off by the test", request=request)
            self._writes_left -= 1
        return self._inner.handle_request(request)


def test_offline_run_synced_after_a_cut_off_stores_every_point_once(
    platform_urls: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api_url, ingestion_url = platform_urls
    with mldiag.init(
        name="on-the-plane",
        run_id="offline-run",
        config={"batch": 64},
        project="vision",
        mode="offline",
        api_url="http://127.0.0.1:9",  # nothing there: offline must not need it
        spool_dir=tmp_path,
        handle_exit=False,
        log_system_metrics=False,
        batch_points=50,
        flush_interval=0.05,
    ):
        for step in range(300):
            mldiag.log({"loss": 1.0 / (step + 1)})
    run_url = f"{api_url}/v1/projects/vision/locations/local/machineLearningRuns/offline-run"
    assert _get(run_url).status_code == 404  # nothing was sent

    settings = Settings.resolve(api_url=api_url, ingestion_url=ingestion_url, spool_dir=tmp_path)
    directory = offline_root(tmp_path) / "offline-run"
    token = os.environ["MLDIAG_TOKEN"]
    cut = httpx.Client(headers={"Authorization": f"Bearer {token}"}, transport=CutOff(2))
    with pytest.raises(SyncError) as raised:
        sync_run(directory, settings, http=cut)
    assert raised.value.unreachable and raised.value.code == "ingestion_unavailable"
    manifest = read_manifest(directory)
    assert manifest is not None and manifest["syncedTime"] is None
    assert _get(run_url).json()["runPhase"] == "ACTIVE"  # created, not finished yet
    assert len(_points(run_url, "loss", 100)) == 100  # the two batches that went

    code = main(
        [
            "sync",
            "--api-url",
            api_url,
            "--ingestion-url",
            ingestion_url,
            "--spool-dir",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "synced offline-run in projects/vision/locations/local: run attached," in out
    assert "4 batches, 200 points, phase COMPLETED" in out

    points = _points(run_url, "loss", 300)
    assert [point["step"] for point in points] == list(range(300))
    described = _get(run_url).json()
    assert described["runPhase"] == "COMPLETED"
    assert described["configs"]["userConfigs"] == {"batch": 64}
    assert described["configs"]["softwareConfigs"]["python_version"]
    stamped = read_manifest(directory)
    assert stamped is not None and stamped["syncedTime"]

    # Synced runs are done: a second sync finds nothing, naming the run again resends nothing.
    assert main(["sync", "--api-url", api_url, "--spool-dir", str(tmp_path)]) == 0
    assert "nothing to sync under " in capsys.readouterr().out
    assert (
        main(["sync", str(directory), "--api-url", api_url, "--ingestion-url", ingestion_url]) == 0
    )
    assert "(synced before): run attached, 0 batches, 0 points" in capsys.readouterr().out
    assert len(_points(run_url, "loss", 300)) == 300
    assert (directory / MANIFEST).is_file()

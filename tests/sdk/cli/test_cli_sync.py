"""``mldiag sync``: offline runs listed (``--dry-run``), uploaded, refused while still being
written, and resumed after the platform stopped answering, with every point stored once."""

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mldiag
from support import free_port


@pytest.fixture(autouse=True)
def _no_current_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("MLDIAG_MODE", "MLDIAG_PROJECT", "MLDIAG_LOCATION", "MLDIAG_SPOOL_DIR"):
        monkeypatch.delenv(name, raising=False)
    yield
    mldiag.finish()


def record_offline(spool: Path, run_id: str, steps: int, **kwargs: Any) -> mldiag.Run:
    """An offline run of ``steps`` losses in batches of 10 points, finished unless
    ``finish=False``."""
    finish = kwargs.pop("finish", True)
    run = mldiag.init(
        name=run_id,
        run_id=run_id,
        mode="offline",
        api_url="http://127.0.0.1:9",
        spool_dir=spool,
        handle_exit=False,
        log_system_metrics=False,
        batch_points=10,
        flush_interval=0.05,
        **kwargs,
    )
    for step in range(steps):
        run.log({"loss": float(step)})
    if finish:
        run.finish()
    else:
        run.flush()
    return run


def test_dry_run_lists_without_sending(mldiag: Callable[..., Any], tmp_path: Path) -> None:
    record_offline(tmp_path, "dry-a", 25)
    record_offline(tmp_path, "dry-b", 10, create_run=False)
    unreachable = f"http://127.0.0.1:{free_port()}"
    listed = mldiag("sync", "--dry-run", "--spool-dir", str(tmp_path), "--api-url", unreachable)
    assert listed.code == 0, listed.err
    assert listed.out.splitlines() == [
        "would sync dry-a: run would be created, 3 batches, 25 points, phase COMPLETED",
        "would sync dry-b: run not created (metric-only), 1 batches, 10 points, phase COMPLETED",
    ]
    again = mldiag("sync", "dry-a", "--dry-run", "--spool-dir", str(tmp_path))
    assert again.out.startswith("would sync dry-a: run would be created, 3 batches")


def test_nothing_to_sync_and_a_target_that_names_nothing(
    mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    empty = mldiag("sync", "--spool-dir", str(tmp_path))
    assert (empty.code, empty.out.strip()) == (0, f"nothing to sync under {tmp_path / 'offline'}")
    missing = mldiag("sync", "no-such-run", "--spool-dir", str(tmp_path))
    assert missing.code == 2
    assert "mldiag sync: error: no offline run at 'no-such-run'" in missing.err


@pytest.mark.connected
def test_sync_refuses_a_live_run_and_resumes_after_an_outage(
    platform_apps: Any, mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    api = ("--api-url", platform_apps.api_url, "--spool-dir", str(tmp_path))
    live = record_offline(tmp_path, "sync-live", 5, finish=False)
    busy = mldiag("sync", "sync-live", *api, "--ingestion-url", platform_apps.ingestion_url)
    assert busy.code == 1
    assert "error: sync-live: run_in_use:" in busy.err
    live.finish()

    record_offline(tmp_path, "sync-later", 40, config={"depth": 50})
    down = f"http://127.0.0.1:{free_port()}"  # ingestion not answering; the registry is
    cut = mldiag("sync", "sync-later", *api, "--ingestion-url", down)
    assert cut.code == 3
    assert "error: sync-later: ingestion_unavailable:" in cut.err

    synced = mldiag("sync", *api, "--ingestion-url", platform_apps.ingestion_url)
    assert synced.code == 0, synced.err
    lines = sorted(synced.out.splitlines())
    assert lines == [
        "synced sync-later: run attached, 4 batches, 40 points, phase COMPLETED",
        "synced sync-live: run created, 1 batches, 5 points, phase COMPLETED",
    ]
    headers = {"Authorization": f"Bearer {platform_apps.tokens.admin}"}
    url = f"{platform_apps.api_url}/v1/machineLearningRuns/sync-later"
    deadline = time.monotonic() + 20
    steps: list[int] = []
    while time.monotonic() < deadline and len(steps) < 40:
        response = httpx.get(f"{url}/metrics/loss", headers=headers)
        steps = [point["step"] for point in response.json().get("points", [])]
        time.sleep(0.1)
    assert steps == list(range(40))
    described = httpx.get(url, headers=headers).json()
    assert (described["runPhase"], described["configs"]["userConfigs"]) == (
        "COMPLETED",
        {"depth": 50},
    )


def test_a_folder_that_holds_no_offline_run_is_left_alone(
    mldiag: Callable[..., Any], tmp_path: Path
) -> None:
    stray = tmp_path / "photos" / "2026"
    stray.mkdir(parents=True)
    (stray / "a.jpg").write_bytes(b"not a spool")
    refused = mldiag("sync", str(tmp_path), "--spool-dir", str(tmp_path / "spool"))
    assert refused.code == 2
    assert sorted(path.name for path in stray.iterdir()) == ["a.jpg"]  # no lock file made

"""The module-level API on the current run: ``mldiag.log``, ``mldiag.finish``,
``mldiag.current_run``, and ``init``'s ``config=`` and ``project=``/``location=``."""

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mldiag
from mldiag.control import ControlStatus, RunPhase, RunSpec
from sdk.fake_platform import FakePlatform


class Recorded:
    """A RunControl that keeps what it was asked (the edge of this unit test)."""

    def __init__(self) -> None:
        self.specs: list[RunSpec] = []

    def ensure_run(self, spec: RunSpec, timeout: float) -> ControlStatus:  # noqa: ARG002
        self.specs.append(spec)
        return ControlStatus.DONE

    def set_phase(self, *args: Any, **kwargs: Any) -> ControlStatus:  # noqa: ARG002
        return ControlStatus.DONE


@pytest.fixture(autouse=True)
def _no_current_run() -> Iterator[None]:
    mldiag.finish()
    yield
    mldiag.finish()


def _init(platform: FakePlatform, tmp: Path, **kwargs: Any) -> mldiag.Run:
    return mldiag.init(
        api_url=platform.url,
        ingestion_url=platform.url,
        spool_dir=tmp,
        handle_exit=False,
        log_system_metrics=False,
        flush_interval=0.05,
        heartbeat_interval=0,
        **kwargs,
    )


def test_log_without_a_run_is_a_clear_error() -> None:
    with pytest.raises(mldiag.NoActiveRunError) as raised:
        mldiag.log({"loss": 1.0})
    assert raised.value.code == "no_active_run"
    assert "call mldiag.init() first" in str(raised.value)
    assert mldiag.finish() is True  # cleanup code may call it anyway


def test_module_log_goes_to_the_run_init_returned_last(
    platform: FakePlatform, tmp_path: Path
) -> None:
    first = _init(platform, tmp_path / "a", run_id="module-first")
    second = _init(platform, tmp_path / "b", run_id="module-second")
    assert mldiag.current_run() is second
    mldiag.log({"loss": 2.0})
    mldiag.log({"loss": 1.0}, step=7)
    assert second.step == 8
    assert mldiag.finish() is True
    assert mldiag.current_run() is None  # the earlier run does not come back
    with pytest.raises(mldiag.NoActiveRunError):
        mldiag.log({"loss": 0.5})
    first.finish()
    assert [(step, value) for _, step, value in platform.received.points("loss")] == [
        (0, 2.0),
        (7, 1.0),
    ]


def test_current_run_is_one_run_across_threads(platform: FakePlatform, tmp_path: Path) -> None:
    run = _init(platform, tmp_path, run_id="module-threads")
    seen: list[mldiag.Run | None] = []
    workers = [threading.Thread(target=lambda: seen.append(mldiag.current_run())) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert seen == [run] * 4
    run.finish()


def test_config_is_the_runs_user_configs(platform: FakePlatform, tmp_path: Path) -> None:
    control = Recorded()
    config = {"model": {"layers": 12, "heads": [8, 8]}, "lr": 3e-4}
    run = _init(platform, tmp_path, run_id="module-config", config=config, control=control)
    run.log({"loss": 1.0})
    assert run.finish() is True
    assert control.specs[0].configs["userConfigs"] == config
    with pytest.raises(TypeError, match="configs= or config="):
        _init(platform, tmp_path, config={"a": 1}, configs={"a": 2})


def test_project_and_location_create_the_run_under_the_long_form(
    platform: FakePlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requested: list[str] = []
    real_post = __import__("httpx").Client.post

    def post(self: Any, url: str, *args: Any, **kwargs: Any) -> Any:
        requested.append(str(url))
        return real_post(self, url, *args, **kwargs)

    monkeypatch.setattr("httpx.Client.post", post)
    run = _init(platform, tmp_path, run_id="module-place", project="vision", location="eu-1")
    run.log({"loss": 1.0})
    run.finish(RunPhase.COMPLETED)
    assert f"{platform.url}/v1/projects/vision/locations/eu-1/machineLearningRuns" in requested


def test_region_is_the_official_names_location(platform: FakePlatform, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="location= or region="):
        mldiag.machinelearning_run(
            "r", base_url=platform.url, region="a", location="b", spool_dir=tmp_path
        )

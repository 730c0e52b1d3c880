"""Fixtures of the integration tests: a run on the fake platform, Keras on its JAX backend."""

import os
from pathlib import Path
from typing import Any

import pytest

import mldiag.run
from sdk.fake_platform import FakePlatform

# Keras 3 picks its backend when first imported; only JAX is installed here.
os.environ.setdefault("KERAS_BACKEND", "jax")


def init_options(platform: FakePlatform, tmp_path: Path) -> dict[str, Any]:
    """``mldiag.init`` keywords for a run on ``platform`` that records exactly what it is told."""
    return {
        "api_url": platform.url,
        "ingestion_url": platform.url,
        "spool_dir": tmp_path / "spool",
        "flush_interval": 0.05,
        "heartbeat_interval": 0,
        "log_system_metrics": False,
        "handle_exit": False,
    }


@pytest.fixture
def options(platform: FakePlatform, tmp_path: Path) -> dict[str, Any]:
    return init_options(platform, tmp_path)


@pytest.fixture(autouse=True)
def _no_current_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without a current run (one left by an earlier test would be used)."""
    monkeypatch.setattr(mldiag.run, "_current", None)

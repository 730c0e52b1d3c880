"""A training service on file:// or gs:// storage (the GCS emulator), for the files room."""

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.settings import StorageSettings
from mldiag_platform.storage import ObjectStore, open_store
from mldiag_schemas.auth import Role
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import free_port, served_on_port

GCS_BUCKET = "mldiag-test"


@pytest.fixture
def gcs_emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A GCS emulator with an empty bucket; ``STORAGE_EMULATOR_HOST`` points at it."""
    from gcp_storage_emulator.server import create_server  # noqa: PLC0415

    port = free_port()
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=GCS_BUCKET)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    try:
        yield f"gs://{GCS_BUCKET}/artifacts"
    finally:
        server.stop()


@dataclass(frozen=True)
class FilesApi:
    """An editor's client of the service, and its storage as the executor sees it."""

    client: httpx.AsyncClient
    store: ObjectStore
    tokens: ApiTokens


BOTH_STORAGES = pytest.mark.parametrize("storage_url", ["file", "gs"], indirect=True)
"""Run a test on file:// and on gs:// (the emulator); file:// alone otherwise."""


@pytest.fixture
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The storage root: file:// unless the test asks for ``gs`` (:data:`BOTH_STORAGES`)."""
    if getattr(request, "param", "file") == "file":
        return f"file://{tmp_path / 'storage'}"
    url: str = request.getfixturevalue("gcs_emulator")
    return url


@pytest.fixture
async def files_api(
    training_settings: TrainingSettings, storage_url: str, api_tokens: ApiTokens
) -> AsyncIterator[FilesApi]:
    """The service with quick log polls, a 1 MiB package limit and a quiet scheduler."""
    overrides: dict[str, Any] = {
        "storage": StorageSettings(url=storage_url),
        "logs_poll_seconds": 0.05,
        "max_package_bytes": 1024 * 1024,
        "tick_seconds": 3600.0,  # nothing changes a replica but the test
    }
    settings = training_settings.model_copy(update=overrides)
    # A real server: followed logs are streamed, which an in-process transport would buffer.
    async with (
        served_on_port(create_app(settings)) as url,
        httpx.AsyncClient(base_url=url, headers=api_tokens.headers(Role.EDITOR)) as client,
    ):
        yield FilesApi(client, open_store(storage_url), api_tokens)

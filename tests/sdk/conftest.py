"""Fixtures of the SDK tests: a fake platform, and the real registry and ingestion."""

from collections.abc import Iterator

import pytest

from conftest import ApiTokens
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from sdk.fake_platform import FakePlatform
from support import served_in_thread


@pytest.fixture
def platform() -> Iterator[FakePlatform]:
    server = FakePlatform()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def platform_urls(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[str, str]]:
    """The registry and ingestion, served (URLs: API, ingestion); the SDK finds an editor's
    token in MLDIAG_TOKEN, and no mode, project, location or API URL of the caller's."""
    monkeypatch.setenv("MLDIAG_TOKEN", api_tokens.editor)
    for name in ("MLDIAG_MODE", "MLDIAG_PROJECT", "MLDIAG_LOCATION", "MLDIAG_API_URL"):
        monkeypatch.delenv(name, raising=False)
    registry = create_registry(
        RunRegistrySettings(nats=nats_settings, database=database_settings, db_schema=db_schema)
    )
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    with served_in_thread(registry) as api_url, served_in_thread(ingestion) as ingestion_url:
        yield api_url, ingestion_url

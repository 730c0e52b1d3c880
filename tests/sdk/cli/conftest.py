"""A real run-registry (and ingestion), and a real training service, on free ports for the
CLI's connected tests."""

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog

from conftest import ApiTokens
from mldiag.cli import main
from mldiag_ingestion.app import create_app as create_ingestion
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from mldiag_run_registry.app import create_app as create_registry
from mldiag_run_registry.settings import RunRegistrySettings
from sdk.cli.training_service import Training, serve_training
from support import served_in_thread


@dataclass(frozen=True)
class Platform:
    """Where the served apps listen."""

    api_url: str
    ingestion_url: str
    tokens: ApiTokens


@pytest.fixture
def platform_apps(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Platform]:
    """The registry and ingestion, served; the CLI's token (``MLDIAG_TOKEN``) is an admin's."""
    monkeypatch.setenv("MLDIAG_TOKEN", api_tokens.admin)
    registry = create_registry(
        RunRegistrySettings(nats=nats_settings, database=database_settings, db_schema=db_schema)
    )
    ingestion = create_ingestion(
        IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0)
    )
    # The servers' info events would land in the stdout the CLI's output is read from (tests
    # never configure structlog, so its defaults print everything there): warnings only.
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        with served_in_thread(registry) as api_url, served_in_thread(ingestion) as ingestion_url:
            yield Platform(api_url, ingestion_url, api_tokens)
    finally:
        structlog.configure(**saved)


@dataclass(frozen=True)
class Result:
    """What one ``mldiag`` invocation did."""

    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither the caller's environment nor a local stack's token reaches the CLI under test."""
    monkeypatch.delenv("MLDIAG_API_URL", raising=False)
    monkeypatch.delenv("MLDIAG_TOKEN", raising=False)
    monkeypatch.setenv("MLDIAG_HOME", str(tmp_path / "mldiag-home"))


@pytest.fixture
def mldiag(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run ``mldiag.cli.main`` in-process; return its exit status and what it printed."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def training(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Training]:
    """The training service, served; the CLI's token (``MLDIAG_TOKEN``) is an editor's."""
    monkeypatch.setenv("MLDIAG_TOKEN", api_tokens.editor)
    with serve_training(nats_settings, database_settings, db_schema, tmp_path / "storage") as t:
        yield t

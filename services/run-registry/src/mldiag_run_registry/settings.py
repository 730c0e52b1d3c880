"""run-registry settings (env ``MLDIAG_RUN_REGISTRY_*`` plus the shared pieces)."""

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.http import DEFAULT_MAX_BODY_BYTES
from mldiag_platform.settings import DatabaseSettings, LogSettings, NatsSettings, StorageSettings
from mldiag_schemas.retention import DEFAULT_DELETED_RUNS_DAYS


class RunRegistrySettings(BaseSettings):
    """How the registry listens, where it stores, how it consumes."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_RUN_REGISTRY_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8080, ge=0, le=65535, description="HTTP port (the API).")
    db_schema: str = Field(default="run_registry", description="PostgreSQL schema it owns.")
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        gt=0,
        description="Largest request body read (413 `payload_too_large` past it, also for"
        " chunked bodies, counted while reading).",
    )
    metrics_batch_size: int = Field(
        default=200, ge=1, description="Metric messages stored per transaction."
    )
    bootstrap_admin_token: SecretStr | None = Field(
        default=None,
        description="An admin token secret to install at start (`mldiag up` generates one);"
        " more tokens are created through the API.",
    )
    xprof_url: str = Field(
        default="http://127.0.0.1:8084",
        description="Base URL of managed XProf (the provisioner's proxy): sessions' dashboard"
        " links point there.",
    )
    capture_grace_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long past its trace length a capture may stay unanswered by the"
        " xprof-provisioner before it fails as `capture_timed_out`.",
    )
    capture_sweep_seconds: float = Field(
        default=10.0, gt=0, description="How often pending captures are checked."
    )
    public_url: str = Field(
        default="",
        description="Base URL browsers reach the API and console at (behind a proxy, say);"
        " share links point there. Empty: the address each request came to.",
    )
    share_link_key: SecretStr | None = Field(
        default=None,
        description="Key that signs share links. Unset: one is made and stored in PostgreSQL"
        " at first start, the same for every replica; changing it invalidates every link.",
    )
    log_retention_days: int = Field(
        default=30,
        ge=0,
        description="Days a run's log lines are kept (by the time of the last line of each"
        " stored chunk); 0 keeps them forever.",
    )
    log_retention_sweep_seconds: float = Field(
        default=3600.0, gt=0, description="How often log lines past retention are deleted."
    )
    retention_sweep_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="How often projects' retention policies are applied (old point partitions"
        " dropped, metric data of long-ended runs expired, runs deleted long ago purged).",
    )
    retention_deleted_runs_days: int = Field(
        default=DEFAULT_DELETED_RUNS_DAYS,
        ge=0,
        description="Days a deleted run keeps its data before it is purged for good, in"
        " projects whose retention policy does not say; 0 keeps deleted runs forever.",
    )
    console_dir: Path | None = Field(
        default=None,
        description="A built console to serve instead of the one built into the package.",
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    storage: StorageSettings = Field(
        default_factory=StorageSettings,
        description="The storage root: artifacts root of runs created without one, and where"
        " captured sessions are stored.",
    )
    log: LogSettings = Field(default_factory=LogSettings)

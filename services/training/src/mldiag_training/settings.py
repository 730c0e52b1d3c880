"""training settings (env ``MLDIAG_TRAINING_*`` plus the shared pieces)."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.http import DEFAULT_MAX_BODY_BYTES
from mldiag_platform.settings import DatabaseSettings, LogSettings, NatsSettings, StorageSettings


class TrainingSettings(BaseSettings):
    """How the training service listens, stores, and schedules replicas."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_TRAINING_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8085, ge=0, le=65535, description="HTTP port (the jobs API).")
    db_schema: str = Field(default="training", description="PostgreSQL schema it owns.")
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        gt=0,
        description="Largest request body read (413 past it, counted while reading).",
    )
    public_api_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The one base URL of the API, as replicas reach it (their MLDIAG_API_URL).",
    )
    machine_types: str = Field(
        default="",
        description="Machine types added to (or replacing entries of) the built-in table: a"
        ' JSON object, e.g. {"my-box": {"cpus": 8, "memoryGb": 32}} (see the scheduler\'s'
        " machine table). Empty: the built-in table only.",
    )
    max_restarts: int = Field(
        default=3, ge=0, description="Restarts of a failed replica before its job fails."
    )
    restart_backoff_seconds: float = Field(
        default=1.0, ge=0, description="Wait before the first restart; doubles per restart."
    )
    restart_backoff_max_seconds: float = Field(
        default=30.0, ge=0, description="Longest wait between two restarts."
    )
    permanent_exit_codes: frozenset[int] = Field(
        default=frozenset({126, 127}),
        description="Exit codes that fail the job at once (126 not executable, 127 not found).",
    )
    executor_timeout_seconds: float = Field(
        default=15.0,
        gt=0,
        description="An executor silent this long loses its replicas (they restart elsewhere).",
    )
    stop_grace_seconds: float = Field(
        default=30.0, ge=0, description="Between SIGTERM and SIGKILL when a replica is stopped."
    )
    tick_seconds: float = Field(
        default=1.0, gt=0, description="How often the scheduler looks at jobs and deadlines."
    )
    tuning_tick_seconds: float = Field(
        default=1.0, gt=0, description="How often the tuning controller looks at every study."
    )
    tuning_metrics_grace_seconds: float = Field(
        default=5.0,
        ge=0,
        description="How long an ended trial waits for its last metric points to be read"
        " before it is finalised anyway.",
    )
    max_package_bytes: int = Field(
        default=256 * 1024 * 1024,
        gt=0,
        description="Largest Python package uploaded to /upload/v1/…/packages (413 past it).",
    )
    logs_poll_seconds: float = Field(
        default=0.5, gt=0, description="How often a followed replica log is read for new bytes."
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    storage: StorageSettings = Field(
        default_factory=StorageSettings,
        description="The storage root: packages uploaded for jobs and replicas' logs.",
    )
    log: LogSettings = Field(default_factory=LogSettings)

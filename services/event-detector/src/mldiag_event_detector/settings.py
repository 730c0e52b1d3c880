"""event-detector settings (env ``MLDIAG_EVENT_DETECTOR_*`` plus the shared pieces)."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.settings import DatabaseSettings, LogSettings, NatsSettings


class EventDetectorSettings(BaseSettings):
    """Where the detector keeps its per-run state and how it consumes."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_EVENT_DETECTOR_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address (health, metrics).")
    port: int = Field(default=8082, ge=0, le=65535, description="HTTP port.")
    db_schema: str = Field(default="event_detector", description="PostgreSQL schema it owns.")
    batch_size: int = Field(default=200, ge=1, description="Messages per transaction.")
    clock_seconds: float = Field(
        default=0.5, gt=0, description="How often time-based rules (hangs) look at due runs."
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    log: LogSettings = Field(default_factory=LogSettings)

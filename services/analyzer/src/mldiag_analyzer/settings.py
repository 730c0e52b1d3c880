"""analyzer settings (env ``MLDIAG_ANALYZER_*`` plus the shared pieces)."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.settings import LogSettings, NatsSettings


class AnalyzerSettings(BaseSettings):
    """How the analyzer listens and consumes."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_ANALYZER_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address (health, metrics).")
    port: int = Field(default=8083, ge=0, le=65535, description="HTTP port.")
    runbook_base_url: str = Field(
        default="docs/runbooks/",
        description="Prefix of runbook links in recommended actions (see docs/runbooks/).",
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)
    log: LogSettings = Field(default_factory=LogSettings)

"""edge settings (env ``MLDIAG_EDGE_*``): where it listens and where each service is."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.edge.routes import (
    INGESTION,
    NOTIFIER,
    RUN_REGISTRY,
    TRAINING,
    XPROF_PROVISIONER,
)
from mldiag_platform.settings import LogSettings


class EdgeSettings(BaseSettings):
    """The edge's address, its upstreams (one per service of the route table) and timeouts."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_EDGE_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8080, ge=0, le=65535, description="The one base URL's port.")
    run_registry_url: str = Field(
        default="http://127.0.0.1:8090", description="run-registry: the API, the console."
    )
    ingestion_url: str = Field(
        default="http://127.0.0.1:8081", description="ingestion: telemetry writes, OTLP/HTTP."
    )
    training_url: str = Field(
        default="http://127.0.0.1:8085", description="training: jobs, uploads, replica logs."
    )
    xprof_provisioner_url: str = Field(
        default="http://127.0.0.1:8084", description="xprof-provisioner: XProf and its proxy."
    )
    notifier_url: str = Field(
        default="http://127.0.0.1:8087",
        description="notifier: notification channels, alert rules, deliveries.",
    )
    connect_timeout_seconds: float = Field(
        default=5.0, gt=0, description="Longest wait to connect to a service."
    )
    read_timeout_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="Longest silence from a service mid-answer (live streams, long waits).",
    )
    max_connections: int = Field(
        default=512, ge=1, description="Most connections open to each service at once."
    )
    log: LogSettings = Field(default_factory=LogSettings)

    def upstreams(self) -> dict[str, str]:
        """Base URL of every service the route table names, by service."""
        return {
            RUN_REGISTRY: self.run_registry_url,
            INGESTION: self.ingestion_url,
            TRAINING: self.training_url,
            XPROF_PROVISIONER: self.xprof_provisioner_url,
            NOTIFIER: self.notifier_url,
        }

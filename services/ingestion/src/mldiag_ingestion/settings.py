"""Ingestion settings (env ``MLDIAG_INGESTION_*``, plus the shared ``MLDIAG_NATS_*``)."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.settings import LogSettings, NatsSettings
from mldiag_schemas.telemetry import MAX_POINTS_PER_REQUEST


class IngestionSettings(BaseSettings):
    """How ingestion listens and what it accepts."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_INGESTION_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8081, ge=0, le=65535, description="HTTP port.")
    max_request_bytes: int = Field(
        default=16 * 1024 * 1024, gt=0, description="Largest body accepted (after gunzip)."
    )
    max_points_per_request: int = Field(
        default=MAX_POINTS_PER_REQUEST, gt=0, description="Most points in one write."
    )
    otlp_enabled: bool = Field(
        default=True,
        description="Serve the OTLP receiver (metrics; configs and log lines as logs): gRPC on"
        " `otlp_grpc_port`, OTLP/HTTP on `otlp_http_port` and on the HTTP port.",
    )
    otlp_grpc_port: int = Field(
        default=4317, ge=0, le=65535, description="OTLP/gRPC port (0: any free port)."
    )
    otlp_http_port: int = Field(
        default=4318, ge=0, le=65535, description="OTLP/HTTP port (0: any free port)."
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)
    log: LogSettings = Field(default_factory=LogSettings)

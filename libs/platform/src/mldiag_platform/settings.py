"""Settings shared by every service. Each piece reads its own env prefix when constructed.

Nothing here reads the environment at import time: a service builds its settings in
``create_app(settings=None)``.
"""

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_schemas.bus import DEFAULT_NAMESPACE

EMBEDDED_NATS_PORT = 14222
"""Port of the NATS server `mldiag up` runs (never the machine's 4222)."""
EMBEDDED_POSTGRES_PORT = 15432
"""Port of the PostgreSQL server `mldiag up` runs (never the machine's 5432)."""


class NatsSettings(BaseSettings):
    """How to reach NATS JetStream (env ``MLDIAG_NATS_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_NATS_", frozen=True)

    url: str = Field(
        default=f"nats://127.0.0.1:{EMBEDDED_NATS_PORT}", description="NATS server URL(s)."
    )
    namespace: str = Field(
        default=DEFAULT_NAMESPACE,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Prefix of every subject and stream of this installation.",
    )
    max_deliver: int = Field(
        default=5, ge=1, description="Attempts before a failing message is dead-lettered."
    )
    ack_wait_seconds: float = Field(
        default=30.0, gt=0, description="How long a consumer may hold a message unacked."
    )
    retry_backoff_seconds: float = Field(
        default=0.5, ge=0, description="First redelivery delay; doubles per attempt."
    )
    publish_timeout_seconds: float = Field(
        default=5.0, gt=0, description="How long to wait for JetStream's publish ack."
    )
    user: str | None = Field(
        default=None,
        description="User on a server with authorization; none connects anonymously.",
    )
    password: SecretStr | None = Field(default=None, description="The user's password.")
    stream_replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Copies JetStream keeps of each stream (3 on a three-node cluster).",
    )


class DatabaseSettings(BaseSettings):
    """How to reach PostgreSQL (env ``MLDIAG_DATABASE_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_DATABASE_", frozen=True)

    url: str = Field(
        default=f"postgresql://mldiag@127.0.0.1:{EMBEDDED_POSTGRES_PORT}/mldiag",
        description="PostgreSQL DSN.",
    )
    pool_min_size: int = Field(default=1, ge=0, description="Connections kept open.")
    pool_max_size: int = Field(default=10, ge=1, description="Most connections open at once.")


class StorageSettings(BaseSettings):
    """Where artifacts and profiles live (env ``MLDIAG_STORAGE_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_STORAGE_", frozen=True)

    url: str = Field(
        default="file://.mldiag/storage",
        description="Artifacts root: `file://DIR` or `gs://BUCKET[/PREFIX]`.",
    )


class LogSettings(BaseSettings):
    """Logging (env ``MLDIAG_LOG_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_LOG_", frozen=True)

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Lowest level written."
    )
    format: Literal["auto", "json", "console"] = Field(
        default="auto", description="`auto`: JSON unless stderr is a terminal."
    )

"""notifier settings (env ``MLDIAG_NOTIFIER_*`` plus the shared pieces)."""

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.http import DEFAULT_MAX_BODY_BYTES
from mldiag_platform.settings import DatabaseSettings, LogSettings, NatsSettings


def default_key_file() -> Path:
    """``$MLDIAG_HOME/notifier.key`` when ``MLDIAG_HOME`` is set, else
    ``~/.mldiag/notifier.key`` (as the executor finds its state directory)."""
    home = os.environ.get("MLDIAG_HOME")
    return (Path(home) if home else Path.home() / ".mldiag") / "notifier.key"


class NotifierSettings(BaseSettings):
    """How the notifier listens, stores, encrypts channel secrets and delivers."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_NOTIFIER_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8087, ge=0, le=65535, description="HTTP port (the alerts API).")
    db_schema: str = Field(default="notifier", description="PostgreSQL schema it owns.")
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES, gt=0, description="Largest request body read."
    )
    public_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The API's public base URL: notifications link to the console under it.",
    )
    secret_key: SecretStr = Field(
        default=SecretStr(""),
        description="Fernet key (url-safe base64 of 32 bytes) encrypting channel secrets at"
        " rest. Empty: the key in `key_file`, made on first start.",
    )
    key_file: Path = Field(
        default_factory=default_key_file,
        description="Where the Fernet key is kept when `secret_key` is empty (created 0600).",
    )
    analysis_wait_seconds: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="How long an opened event's notification waits for its analysis (the top"
        " cause) before it goes without.",
    )
    poll_seconds: float = Field(
        default=0.2, gt=0, description="How often due deliveries are looked for."
    )
    max_attempts: int = Field(
        default=8, ge=1, le=100, description="Attempts of a delivery before it is DEAD."
    )
    backoff_seconds: float = Field(
        default=1.0, gt=0, description="Wait after the first failed attempt; doubles after each."
    )
    backoff_max_seconds: float = Field(
        default=300.0, gt=0, description="Longest wait between two attempts."
    )
    send_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Timeout of one attempt (HTTP request, SMTP session)."
    )
    claim_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How long a claimed delivery is held by the replica sending it; one that"
        " crashed mid-send has it tried again after this.",
    )
    send_batch: int = Field(
        default=20, ge=1, le=500, description="Deliveries claimed and sent at once."
    )
    nats: NatsSettings = Field(default_factory=NatsSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    log: LogSettings = Field(default_factory=LogSettings)

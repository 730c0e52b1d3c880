"""executor settings (env ``MLDIAG_EXECUTOR_*`` plus the shared pieces)."""

import os
import re
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.settings import LogSettings, NatsSettings, StorageSettings
from mldiag_schemas.ids import is_resource_id

_NOT_ID = re.compile(r"[^a-z0-9-]+")


def default_executor_id() -> str:
    """``local-`` and this machine's host name, made a resource id (it is a subject token)."""
    host = _NOT_ID.sub("-", socket.gethostname().lower()).strip("-")[:56].strip("-")
    return f"local-{host or 'host'}"


def default_state_dir() -> Path:
    """``$MLDIAG_HOME/executor`` when ``MLDIAG_HOME`` is set, else ``~/.mldiag/executor``."""
    home = os.environ.get("MLDIAG_HOME")
    return (Path(home) if home else Path.home() / ".mldiag") / "executor"


class ExecutorSettings(BaseSettings):
    """Which executor this is, where it runs replicas and what it offers."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_EXECUTOR_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address (health, metrics).")
    port: int = Field(default=8086, ge=0, le=65535, description="HTTP port.")
    executor_id: str = Field(
        default_factory=default_executor_id,
        description="This executor's id (a resource id): its subject token and durable suffix.",
    )
    backend: Literal["local", "ray", "kubernetes"] = Field(
        default="local", description="Where replicas run."
    )
    state_dir: Path = Field(
        default_factory=default_state_dir,
        description="Attempts' directories and the package cache; must survive restarts.",
    )
    first_port: int = Field(
        default=20000, ge=1, le=65535, description="First port the scheduler gives replicas."
    )
    port_count: int = Field(default=1000, ge=1, le=65535, description="Ports from first_port.")
    cpu_overcommit: float = Field(
        default=4.0, gt=0, description="Announced CPUs = the host's cores times this."
    )
    cpus: float | None = Field(
        default=None, gt=0, description="Announced CPUs, instead of cores x overcommit."
    )
    memory_bytes: int | None = Field(
        default=None, gt=0, description="Announced memory, instead of the host's total."
    )
    images: dict[str, str] = Field(
        default_factory=dict,
        description="Image prefix → python interpreter (or venv directory); longest prefix "
        "wins; anything unmatched runs with the executor's own interpreter.",
    )
    announce_seconds: float = Field(
        default=2.0, gt=0, description="Seconds between two ExecutorAnnounced."
    )
    address: str = Field(
        default="",
        description="The host name or IP other replicas reach this executor's replicas at "
        "(default: the backend's own idea, 127.0.0.1 for local).",
    )
    log_upload_seconds: float = Field(
        default=5.0, gt=0, description="With gs:// storage, seconds between log uploads."
    )
    stop_grace_seconds: float = Field(
        default=10.0, ge=0, description="Grace before SIGKILL when a deadline passes."
    )
    pip_timeout_seconds: float = Field(
        default=600.0, gt=0, description="Most seconds one package install may take."
    )
    storage: StorageSettings = Field(default_factory=StorageSettings)
    nats: NatsSettings = Field(default_factory=NatsSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @field_validator("executor_id")
    @classmethod
    def _resource_id(cls, value: str) -> str:
        if not is_resource_id(value):
            raise ValueError(
                f"{value!r} is not a resource id (lowercase letters, digits and '-', "
                "at most 63 characters)"
            )
        return value

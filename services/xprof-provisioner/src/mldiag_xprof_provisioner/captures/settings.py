"""Captures' settings: the ``capture`` part of the service's settings."""

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class CaptureSettings(BaseSettings):
    """How captures run (env ``MLDIAG_XPROF_PROVISIONER_CAPTURE_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_XPROF_PROVISIONER_CAPTURE_", frozen=True)

    max_concurrent: int = Field(
        default=4, ge=1, description="Most captures tracing at once (one child process each)."
    )
    num_tracing_attempts: int = Field(
        default=3, ge=1, le=10, description="Attempts inside the capture client per capture."
    )
    timeout_margin_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A capture's child is killed after its duration, the multi-host delay "
        "and this margin.",
    )
    probe_timeout_seconds: float = Field(
        default=2.0, gt=0, description="How long a target's port may take to accept a probe."
    )
    scratch_dir: Path | None = Field(
        default=None,
        description="Where the client writes before the upload (default: the provisioner's "
        "work dir, whose leftovers a restarted provisioner removes).",
    )

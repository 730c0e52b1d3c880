"""xprof-provisioner settings (env ``MLDIAG_XPROF_PROVISIONER_*``, plus the shared pieces)."""

from pathlib import Path
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_platform.settings import LogSettings, NatsSettings, StorageSettings
from mldiag_xprof_provisioner.captures.settings import CaptureSettings

GIB = 1024**3


class XProfProvisionerSettings(BaseSettings):
    """How the provisioner listens, where it keeps copies and how many XProfs it runs."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_XPROF_PROVISIONER_", frozen=True)

    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    port: int = Field(default=8084, ge=0, le=65535, description="HTTP port.")
    work_dir: Path = Field(
        default=Path(".mldiag/xprof"),
        description="Where each instance gets its writable copy of its runs' sessions and its "
        "log, and where pre-warming converts sessions.",
    )
    first_instance_port: int = Field(
        default=9100, ge=1024, le=65534, description="First port of the instances' port range."
    )
    instance_port_count: int = Field(
        default=100,
        ge=1,
        description="Size of the port range; every instance takes one HTTP port on loopback.",
    )
    max_instances: int = Field(
        default=4, ge=1, description="Most XProf processes running (or starting) at once."
    )
    max_instances_per_caller: int = Field(
        default=2,
        ge=1,
        description="Most instances one caller (API token) may have started and still running: "
        "asking for another recycles that caller's least recently used idle one.",
    )
    eviction_idle_seconds: float = Field(
        default=60.0,
        ge=0,
        description="When every instance slot is taken, another caller's instance unused for "
        "this long (and answering no request) is stopped to make room.",
    )
    idle_timeout_seconds: float = Field(
        default=900.0, gt=0, description="An instance not used for this long is stopped."
    )
    startup_timeout_seconds: float = Field(
        default=30.0, gt=0, description="How long XProf may take to answer after launch."
    )
    stop_grace_seconds: float = Field(
        default=5.0, ge=0, description="How long XProf may take to exit after SIGTERM."
    )
    memory_limit_bytes: int = Field(
        default=4 * GIB,
        ge=0,
        description="An instance whose resident memory passes this is restarted (XProf never "
        "returns what a large trace took); 0: no cap.",
    )
    memory_check_seconds: float = Field(
        default=10.0, gt=0, description="How often instances' memory is measured."
    )
    public_url: str = Field(
        default="",
        description="Base URL browsers reach this service at (https://mldiag.example.com), "
        "for instance URLs; empty: instance URLs are paths on this service "
        "(/xprof/<id>/data/plugin/profile/).",
    )
    proxy_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long the proxy waits for XProf's answer (a cold trace converts first).",
    )
    proxy_connections: int = Field(
        default=64, ge=1, description="Most connections the proxy keeps open to instances."
    )
    warm_concurrency: int = Field(
        default=1,
        ge=1,
        description="Sessions pre-warmed at once (each conversion takes 50-90x its xplane in RAM).",
    )
    warm_timeout_seconds: float = Field(
        default=900.0, gt=0, description="A pre-warm conversion running longer is killed."
    )
    capture: CaptureSettings = Field(default_factory=CaptureSettings)
    nats: NatsSettings = Field(default_factory=NatsSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    log: LogSettings = Field(default_factory=LogSettings)

    @model_validator(mode="after")
    def _port_range_fits(self) -> Self:
        last = self.first_instance_port + self.instance_port_count - 1
        if last > 65535:
            raise ValueError(f"the instance port range ends at {last}, past 65535")
        return self

    @property
    def instance_ports(self) -> range:
        """The ports instances may use."""
        return range(self.first_instance_port, self.first_instance_port + self.instance_port_count)

    @property
    def base_url(self) -> str:
        """Where browsers reach this service, without a trailing slash ("" when unknown)."""
        return self.public_url.rstrip("/")

"""The Kubernetes backend's settings (env ``MLDIAG_EXECUTOR_K8S_*``)."""

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class KubernetesBackendSettings(BaseSettings):
    """How the executor uses a Kubernetes cluster (env ``MLDIAG_EXECUTOR_K8S_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_EXECUTOR_K8S_", frozen=True)

    namespace: str = Field(
        default="",
        description="Where Jobs are created (default: the executor pod's own namespace, "
        "else ``default``).",
    )
    service_account: str = Field(default="", description="The pods' service account.")
    launcher: list[str] = Field(
        default_factory=lambda: ["mldiag", "run", "--replica", "{replica}"],
        description="The launcher in the image, before ``-- <command>``; ``{replica}`` "
        "becomes the replica's name.",
    )
    python: str = Field(default="python", description="The image's interpreter.")
    backoff_limit_per_index: int = Field(
        default=0,
        ge=0,
        description="Kubernetes' own retries per index (invisible to the scheduler, which "
        "restarts failed replicas itself); preemptions never count.",
    )
    permanent_exit_codes: list[int] = Field(
        default_factory=lambda: [126, 127], description="Exit codes that fail the index."
    )
    accelerator_label: str = Field(
        default="cloud.google.com/gke-accelerator",
        description="The node label that names a node's GPU type.",
    )
    tpu_label: str = Field(
        default="cloud.google.com/gke-tpu-accelerator",
        description="The node label that names a node's TPU type.",
    )
    accelerator_type: str = Field(
        default="", description="The accelerator type announced (Vertex's name)."
    )
    accelerator_count: int = Field(default=0, ge=0, description="How many are announced.")
    ttl_seconds_after_finished: int = Field(
        default=3600, ge=0, description="How long a finished Job is kept."
    )
    collect_seconds: float = Field(
        default=1.0, gt=0, description="How long an attempt's commands are collected."
    )
    poll_seconds: float = Field(default=2.0, gt=0, description="Seconds between Job reads.")
    address: str = Field(
        default="replicas.mldiag.invalid",
        description="The placeholder address the executor announces (rewritten per pod).",
    )

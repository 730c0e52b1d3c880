"""Custom jobs: the Vertex AI v1 ``CustomJob`` resource, as the training service serves it.

Field names, enum names and encodings follow Vertex v1 and proto3 JSON exactly, so the
``google-cloud-aiplatform`` SDK (REST transport) works unchanged:

- camelCase on the wire, snake_case accepted (proto3 JSON parsers accept both);
- int64 fields are JSON strings (``"replicaCount": "2"``), numbers accepted;
- enums are their names, numbers accepted (the SDK sends ``enum-encoding=int``); a response
  is turned into numbers by the service when the request asks for it (:data:`ENUM_NUMBERS`);
- durations are proto ``Duration`` JSON (``"3600s"``, ``"1.5s"``).

Vertex fields mldiag knows but does not provide (a VPC network, reserved IP ranges, a
persistent resource, ...) are listed in :data:`UNSUPPORTED_JOB_FIELDS` and friends so the
service refuses them by name instead of ignoring them; fields nobody knows are refused by
the strict models themselves.
"""

import enum
import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    StringConstraints,
    field_validator,
    model_validator,
)

from mldiag_schemas.base import Contract

MAX_REPLICAS_PER_POOL = 1_000
"""The most replicas one worker pool may ask for."""
MAX_WORKER_POOLS = 4
"""Vertex's four roles: chief, workers, parameter servers, evaluators."""
MAX_ENV_VARS = 100
"""Vertex's limit on ``env`` entries per container or package spec."""
MAX_PACKAGE_URIS = 100
"""Vertex's limit on ``packageUris``."""
DEFAULT_TIMEOUT_SECONDS = 7 * 24 * 3600.0
"""Vertex's default ``scheduling.timeout``: seven days."""
POOL_ROLES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
"""What each pool position means (TF_CONFIG's task types)."""


class JobState(enum.StrEnum):
    """Vertex's ``JobState`` (shared by custom and tuning jobs)."""

    UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    QUEUED = "JOB_STATE_QUEUED"
    PENDING = "JOB_STATE_PENDING"
    RUNNING = "JOB_STATE_RUNNING"
    SUCCEEDED = "JOB_STATE_SUCCEEDED"
    FAILED = "JOB_STATE_FAILED"
    CANCELLING = "JOB_STATE_CANCELLING"
    CANCELLED = "JOB_STATE_CANCELLED"
    PAUSED = "JOB_STATE_PAUSED"
    EXPIRED = "JOB_STATE_EXPIRED"
    UPDATING = "JOB_STATE_UPDATING"
    PARTIALLY_SUCCEEDED = "JOB_STATE_PARTIALLY_SUCCEEDED"

    @property
    def terminal(self) -> bool:
        """Whether the job has ended: a terminal state never changes again."""
        return self in TERMINAL_JOB_STATES


TERMINAL_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED}
)
"""States a job never leaves."""


class AcceleratorType(enum.StrEnum):
    """Vertex's ``AcceleratorType`` (v1)."""

    UNSPECIFIED = "ACCELERATOR_TYPE_UNSPECIFIED"
    NVIDIA_TESLA_K80 = "NVIDIA_TESLA_K80"
    NVIDIA_TESLA_P100 = "NVIDIA_TESLA_P100"
    NVIDIA_TESLA_V100 = "NVIDIA_TESLA_V100"
    NVIDIA_TESLA_P4 = "NVIDIA_TESLA_P4"
    NVIDIA_TESLA_T4 = "NVIDIA_TESLA_T4"
    NVIDIA_TESLA_A100 = "NVIDIA_TESLA_A100"
    NVIDIA_A100_80GB = "NVIDIA_A100_80GB"
    NVIDIA_L4 = "NVIDIA_L4"
    NVIDIA_H100_80GB = "NVIDIA_H100_80GB"
    NVIDIA_H100_MEGA_80GB = "NVIDIA_H100_MEGA_80GB"
    NVIDIA_H200_141GB = "NVIDIA_H200_141GB"
    NVIDIA_B200 = "NVIDIA_B200"
    NVIDIA_GB200 = "NVIDIA_GB200"
    NVIDIA_RTX_PRO_6000 = "NVIDIA_RTX_PRO_6000"
    TPU_V2 = "TPU_V2"
    TPU_V3 = "TPU_V3"
    TPU_V4_POD = "TPU_V4_POD"
    TPU_V5_LITEPOD = "TPU_V5_LITEPOD"


class Strategy(enum.StrEnum):
    """Vertex's ``Scheduling.Strategy``."""

    UNSPECIFIED = "STRATEGY_UNSPECIFIED"
    ON_DEMAND = "ON_DEMAND"
    LOW_COST = "LOW_COST"
    STANDARD = "STANDARD"
    SPOT = "SPOT"
    FLEX_START = "FLEX_START"


ENUM_NUMBERS: dict[type[enum.StrEnum], dict[str, int]] = {
    JobState: {state.value: number for number, state in enumerate(JobState)},
    AcceleratorType: {
        "ACCELERATOR_TYPE_UNSPECIFIED": 0,
        "NVIDIA_TESLA_K80": 1,
        "NVIDIA_TESLA_P100": 2,
        "NVIDIA_TESLA_V100": 3,
        "NVIDIA_TESLA_P4": 4,
        "NVIDIA_TESLA_T4": 5,
        "NVIDIA_TESLA_A100": 8,
        "NVIDIA_A100_80GB": 9,
        "NVIDIA_L4": 11,
        "NVIDIA_H100_80GB": 13,
        "NVIDIA_H100_MEGA_80GB": 14,
        "NVIDIA_H200_141GB": 15,
        "NVIDIA_B200": 16,
        "NVIDIA_GB200": 17,
        "NVIDIA_RTX_PRO_6000": 18,
        "TPU_V2": 6,
        "TPU_V3": 7,
        "TPU_V4_POD": 10,
        "TPU_V5_LITEPOD": 12,
    },
    Strategy: {
        "STRATEGY_UNSPECIFIED": 0,
        "ON_DEMAND": 1,
        "LOW_COST": 2,
        "STANDARD": 3,
        "SPOT": 4,
        "FLEX_START": 6,
    },
}
"""Each Vertex enum's proto numbers, by name (``enum-encoding=int`` on the wire)."""

ENUM_FIELDS: dict[str, type[enum.StrEnum]] = {
    "state": JobState,
    "acceleratorType": AcceleratorType,
    "strategy": Strategy,
}
"""The camelCase JSON keys whose values are one of the enums above, in a CustomJob."""


def enum_from_number(kind: type[enum.StrEnum], numbers: dict[str, int] | None = None) -> Any:
    """A validator accepting ``kind``'s proto number (from ``numbers``, by default its row of
    :data:`ENUM_NUMBERS`) where its name is expected."""
    names = {number: name for name, number in (numbers or ENUM_NUMBERS[kind]).items()}

    def parse(value: Any) -> Any:
        if isinstance(value, bool):
            return value  # pydantic refuses it with the enum's own message
        if isinstance(value, int):
            if value not in names:
                raise ValueError(f"{value} is not a {kind.__name__} number")
            return names[value]
        return value

    return BeforeValidator(parse)


def _int64(value: int) -> str:
    return str(value)


Int64 = Annotated[int, PlainSerializer(_int64, return_type=str, when_used="json")]
"""A proto int64: a JSON string on the wire; a number or a numeric string is accepted."""

_DURATION = re.compile(r"^(-?\d+(?:\.\d{1,9})?)s$")


def parse_duration(value: Any) -> Any:
    """A proto ``Duration`` in JSON (``"3600s"``) as seconds; numbers pass through."""
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not a duration: write seconds with an s, e.g. '3600s'")
        return float(match.group(1))
    return value


def _duration_json(seconds: float) -> str:
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(_duration_json, return_type=str, when_used="json"),
]
"""A proto ``Duration``: ``"3600s"`` on the wire, seconds in Python."""

LabelKey = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]
"""A label key: lowercase letters, digits, ``_`` and ``-``, starting with a letter."""
LabelValue = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{0,63}$")]
"""A label value: lowercase letters, digits, ``_`` and ``-``, at most 63 characters."""
Text = Annotated[str, StringConstraints(max_length=10_000)]
"""A command-line word, an environment value, a URI."""


class EnvVar(Contract):
    """One environment variable of a replica; ``$(NAME)`` expands as in Vertex."""

    name: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=1000, description="The variable's name."
    )
    value: Text = Field(default="", description="Its value (``$$(X)`` escapes ``$(X)``).")


class ContainerSpec(Contract):
    """Run a container image's command. On process executors the image names an environment
    (an interpreter or venv, see the executor's image table) and the command runs on the host.
    """

    image_uri: Text = Field(min_length=1, description="The image (or environment) to run in.")
    command: list[Text] = Field(
        default_factory=list, max_length=1000, description="Overrides the image's entrypoint."
    )
    args: list[Text] = Field(default_factory=list, max_length=10_000, description="Arguments.")
    env: list[EnvVar] = Field(
        default_factory=list, max_length=MAX_ENV_VARS, description="Environment variables."
    )


class PythonPackageSpec(Contract):
    """Install Python packages (sdists or wheels from object storage) and run a module."""

    executor_image_uri: Text = Field(
        min_length=1, description="The prebuilt image (or environment) the package runs in."
    )
    package_uris: list[Text] = Field(
        min_length=1,
        max_length=MAX_PACKAGE_URIS,
        description="``gs://`` or ``file://`` URIs of sdists or wheels to install.",
    )
    python_module: Text = Field(
        min_length=1,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
        description="The module to run with ``python -m``.",
    )
    args: list[Text] = Field(default_factory=list, max_length=10_000, description="Arguments.")
    env: list[EnvVar] = Field(
        default_factory=list, max_length=MAX_ENV_VARS, description="Environment variables."
    )


class MachineSpec(Contract):
    """The machine each replica of a pool needs; the executors' machine table maps the type
    to CPUs and memory."""

    machine_type: str = Field(
        default="", max_length=100, description="A machine type of the machine table."
    )
    accelerator_type: Annotated[AcceleratorType, enum_from_number(AcceleratorType)] = Field(
        default=AcceleratorType.UNSPECIFIED, description="The accelerator, if any."
    )
    accelerator_count: int = Field(
        default=0, ge=0, le=64, description="How many accelerators each replica gets."
    )


class DiskSpec(Contract):
    """The boot disk (accepted and recorded; process executors give the host's disk)."""

    boot_disk_type: str = Field(default="", max_length=100, description="e.g. ``pd-ssd``.")
    boot_disk_size_gb: int = Field(default=0, ge=0, le=64_000, description="Size in GB.")


class WorkerPoolSpec(Contract):
    """One pool of identical replicas. A pool's position is its role (chief, workers,
    parameter servers, evaluators); ``{}`` skips a position."""

    container_spec: ContainerSpec | None = Field(default=None, description="A command to run.")
    python_package_spec: PythonPackageSpec | None = Field(
        default=None, description="A Python package to install and run."
    )
    machine_spec: MachineSpec | None = Field(default=None, description="Each replica's machine.")
    replica_count: Int64 = Field(
        default=0, ge=0, le=MAX_REPLICAS_PER_POOL, description="How many replicas (int64)."
    )
    disk_spec: DiskSpec | None = Field(default=None, description="The boot disk.")

    @property
    def empty(self) -> bool:
        """A skipped position (``{}``)."""
        return self == WorkerPoolSpec()

    @model_validator(mode="after")
    def _one_task(self) -> "WorkerPoolSpec":
        if self.container_spec is not None and self.python_package_spec is not None:
            raise ValueError("set one of containerSpec and pythonPackageSpec, not both")
        return self


class Scheduling(Contract):
    """How the job is scheduled and restarted."""

    timeout: Duration | None = Field(
        default=None, gt=0, description="Fail with DEADLINE_EXCEEDED after this (default 7d)."
    )
    restart_job_on_worker_restart: bool = Field(
        default=False, description="Restart every replica when any one restarts."
    )
    strategy: Annotated[Strategy, enum_from_number(Strategy)] = Field(
        default=Strategy.UNSPECIFIED, description="STANDARD or SPOT (others are refused)."
    )
    disable_retries: bool = Field(default=False, description="Never restart a failed replica.")
    max_wait_duration: Duration | None = Field(
        default=None, description="Only for FLEX_START, which mldiag does not provide."
    )


class GcsDestination(Contract):
    """Where the job's outputs go."""

    output_uri_prefix: Text = Field(
        min_length=1, description="``gs://bucket/prefix`` or ``file:///path`` of the outputs."
    )


class CustomJobSpec(Contract):
    """What a custom job runs."""

    worker_pool_specs: list[WorkerPoolSpec] = Field(
        min_length=1, max_length=MAX_WORKER_POOLS, description="The pools, by role position."
    )
    scheduling: Scheduling | None = Field(default=None, description="Timeout and restarts.")
    base_output_directory: GcsDestination | None = Field(
        default=None, description="Drives AIP_MODEL_DIR, AIP_CHECKPOINT_DIR, AIP_TENSORBOARD_…"
    )
    experiment: str = Field(default="", max_length=128, description="Experiment (a run set).")
    experiment_run: str = Field(
        default="", max_length=128, description="The experiment run's name (the run's display)."
    )

    @field_validator("worker_pool_specs")
    @classmethod
    def _roles(cls, pools: list[WorkerPoolSpec]) -> list[WorkerPoolSpec]:
        if pools[0].empty:
            raise ValueError("workerPoolSpecs[0] (the chief) must not be empty")
        if pools[-1].empty:
            raise ValueError("leave trailing empty pools out of workerPoolSpecs")
        return pools


UNSUPPORTED_JOB_FIELDS: dict[str, str] = {
    "encryptionSpec": "customer-managed encryption keys",
    "satisfiesPzs": "an output-only Vertex field",
    "satisfiesPzi": "an output-only Vertex field",
}
"""CustomJob fields mldiag refuses by name (UNIMPLEMENTED), with what they are."""

UNSUPPORTED_JOB_SPEC_FIELDS: dict[str, str] = {
    "persistentResourceId": "persistent resources",
    "serviceAccount": "service accounts (replicas run as the executor's user)",
    "network": "VPC networks",
    "reservedIpRanges": "reserved IP ranges",
    "pscInterfaceConfig": "Private Service Connect",
    "protectedArtifactLocationId": "protected artifact locations",
    "tensorboard": "Vertex TensorBoard instances (logs go to AIP_TENSORBOARD_LOG_DIR)",
    "enableWebAccess": "interactive shells",
    "enableDashboardAccess": "dashboard access",
    "models": "model lineage on the job",
}
"""jobSpec fields mldiag refuses by name (UNIMPLEMENTED)."""

UNSUPPORTED_POOL_FIELDS: dict[str, str] = {
    "nfsMounts": "NFS mounts",
    "lustreMounts": "Lustre mounts",
}
"""workerPoolSpecs[] fields mldiag refuses by name (UNIMPLEMENTED)."""

UNSUPPORTED_MACHINE_FIELDS: dict[str, str] = {
    "gpuPartitionSize": "GPU partitions (MIG)",
    "tpuTopology": "TPU topologies",
    "reservationAffinity": "reservations",
}
"""machineSpec fields mldiag refuses by name (UNIMPLEMENTED)."""


ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
"""The ``@type`` of a ``google.rpc.ErrorInfo`` detail (each detail of a Status is an Any)."""
ERROR_DOMAIN = "mldiag"
"""``ErrorInfo.domain`` of every error mldiag's training API states."""


class RpcStatus(Contract):
    """``google.rpc.Status``: why a job failed or was cancelled."""

    code: int = Field(description="The google.rpc.Code number (4 DEADLINE_EXCEEDED, 1 …).")
    message: str = Field(default="", description="What happened, for people.")
    details: list[dict[str, Any]] = Field(default_factory=list, description="Specifics.")


class CustomJob(Contract):
    """A custom job, as created (``displayName``, ``jobSpec``, ``labels``) and as served (the
    output-only fields). Its id is also the id of its ML run."""

    name: str = Field(
        default="", description="Output: ``projects/{p}/locations/{l}/customJobs/{id}``."
    )
    display_name: str = Field(min_length=1, max_length=128, description="A name for people.")
    job_spec: CustomJobSpec = Field(description="What to run.")
    state: Annotated[JobState, enum_from_number(JobState)] = Field(
        default=JobState.UNSPECIFIED, description="Output: where the job is."
    )
    create_time: datetime | None = Field(default=None, description="Output: created.")
    start_time: datetime | None = Field(default=None, description="Output: first RUNNING.")
    end_time: datetime | None = Field(default=None, description="Output: reached its end.")
    update_time: datetime | None = Field(default=None, description="Output: last change.")
    error: RpcStatus | None = Field(default=None, description="Output: when FAILED/CANCELLED.")
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=64, description="Labels (Vertex's rules)."
    )
    web_access_uris: dict[str, str] = Field(
        default_factory=dict, description="Output: always empty (no interactive shells)."
    )


class ListCustomJobsResponse(Contract):
    """A page of ``GET .../customJobs``."""

    custom_jobs: list[CustomJob] = Field(default_factory=list, description="The page.")
    next_page_token: str = Field(default="", description="Pass as pageToken for the next page.")


class ReplicaState(enum.StrEnum):
    """Where one replica attempt is (mldiag's view; Vertex does not expose replicas)."""

    PENDING = "PENDING"
    """Placed on an executor, not started yet."""
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RESTARTING = "RESTARTING"
    """Failed, and waiting out its backoff before the next attempt."""
    CANCELLED = "CANCELLED"
    """Stopped on purpose (cancel, timeout, a gang restart)."""


class Replica(Contract):
    """One replica of a job (mldiag extension: ``.../customJobs/{id}/replicas``)."""

    name: str = Field(description="``workerpool{pool}-{index}``, Vertex's replica name.")
    pool: int = Field(ge=0, lt=MAX_WORKER_POOLS, description="The pool's position.")
    index: int = Field(ge=0, description="The replica's index in its pool.")
    attempt: int = Field(ge=0, description="0 for the first run, +1 per restart.")
    state: ReplicaState = Field(description="Where the current attempt is.")
    executor: str = Field(default="", description="The executor it is placed on.")
    host: str = Field(default="", description="Where it runs (host or pod).")
    exit_code: int | None = Field(default=None, description="The last attempt's exit code.")
    message: str = Field(default="", description="Why it ended, for people.")
    start_time: datetime | None = Field(default=None, description="The attempt started.")
    end_time: datetime | None = Field(default=None, description="The attempt ended.")


class ListReplicasResponse(Contract):
    """``GET .../customJobs/{id}/replicas``: every replica's current attempt."""

    replicas: list[Replica] = Field(default_factory=list, description="By pool, then index.")


class VertexErrorStatus(Contract):
    """The ``error`` of a Vertex-style error body (google.rpc.Status over HTTP)."""

    code: int = Field(description="The HTTP status code.")
    message: str = Field(description="What went wrong, for people.")
    status: str = Field(description="The canonical code name, e.g. ``INVALID_ARGUMENT``.")
    details: list[dict[str, Any]] = Field(default_factory=list, description="Specifics.")


class VertexErrorBody(Contract):
    """``{"error": {"code", "message", "status", "details"}}``: how the training API answers
    4xx and 5xx, so Google's client libraries raise the matching exception."""

    error: VertexErrorStatus = Field(description="The error.")


EMPTY_TYPE_URL = "type.googleapis.com/google.protobuf.Empty"
"""The ``@type`` of an empty operation response."""


class EmptyResponse(Contract):
    """``google.protobuf.Empty`` packed in a ``google.protobuf.Any``."""

    type_url: str = Field(
        default=EMPTY_TYPE_URL, alias="@type", description="Always google.protobuf.Empty."
    )


class JobOperation(Contract):
    """A long-running operation on a custom job, answered done (``DELETE
    .../customJobs/{id}``: deleting finishes before the answer)."""

    name: str = Field(description="``projects/{p}/locations/{l}/customJobs/{id}/operations/{op}``.")
    done: bool = Field(default=True, description="Always true: the work is finished.")
    response: EmptyResponse = Field(
        default_factory=EmptyResponse, description="``google.protobuf.Empty``."
    )

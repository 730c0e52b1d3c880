"""The bus contracts of training: jobs' facts, the commands executors take from their work
queue, and the facts executors report about replicas.

The training service owns jobs and places every replica on an executor (the scheduler is
one writer, so capacity is never promised twice). Executors take ``StartReplica`` and
``StopReplica`` from their own subject of the DISPATCH work queue and answer with
``ReplicaStarted`` and ``ReplicaExited``; they announce themselves and their capacity on core
NATS every few seconds. A replica attempt is identified by ``(job, pool, index, attempt)``:
a fact about an attempt the service no longer expects is answered with a stop, so a replica
never runs twice.
"""

from datetime import datetime
from typing import Literal

from pydantic import Field, SecretStr, field_serializer

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import LocationId, ProjectId, RunId
from mldiag_schemas.jobs import (
    MAX_REPLICAS_PER_POOL,
    MAX_WORKER_POOLS,
    CustomJob,
    JobState,
    RpcStatus,
)
from mldiag_schemas.tuning import TrialOfJob

ExecutorId = RunId
"""An executor's id: a resource id (it is a subject token and a durable name's suffix)."""


class ReplicaKey(Contract):
    """One attempt of one replica of a job."""

    job_id: RunId = Field(description="The job (and its run).")
    pool: int = Field(ge=0, lt=MAX_WORKER_POOLS, description="The pool's position (its role).")
    index: int = Field(ge=0, lt=MAX_REPLICAS_PER_POOL, description="The replica's index.")
    attempt: int = Field(ge=0, description="0 for the first run, +1 per restart.")

    @property
    def replica_name(self) -> str:
        """Vertex's name for the replica, e.g. ``workerpool0-0``."""
        return f"workerpool{self.pool}-{self.index}"


class Resources(Contract):
    """What a replica needs, or what an executor has."""

    cpus: float = Field(ge=0, description="CPU cores.")
    memory_bytes: int = Field(ge=0, description="Memory.")
    accelerator_type: str = Field(
        default="", description="The accelerator's Vertex name; empty for none."
    )
    accelerator_count: int = Field(default=0, ge=0, description="How many accelerators.")


class ReplicaLaunch(Contract):
    """Everything an executor needs to start one replica attempt."""

    image_uri: str = Field(
        description="The container image, or on process executors the environment it names."
    )
    command: list[str] = Field(
        default_factory=list,
        description="The argv to run (containerSpec command + args); empty for a package.",
    )
    package_uris: list[str] = Field(
        default_factory=list, description="Packages to install first (pythonPackageSpec)."
    )
    python_module: str = Field(default="", description="Module to run with python -m.")
    args: list[str] = Field(
        default_factory=list, description="The module's arguments (pythonPackageSpec)."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="The replica's environment: the spec's env, CLUSTER_SPEC, TF_CONFIG, "
        "MASTER_ADDR/PORT, WORLD_SIZE, RANK, AIP_*, CLOUD_ML_*, MLDIAG_*.",
    )
    resources: Resources = Field(description="What the machine spec asks for.")
    port: int = Field(
        ge=1, le=65535, description="The port this replica serves on in CLUSTER_SPEC."
    )
    logs_uri: str = Field(
        description="Where the attempt's stdout/stderr go: ``<uri>/stdout.log`` and "
        "``<uri>/stderr.log`` (object storage)."
    )


class StartReplica(Envelope):
    """Command: start one replica attempt. Subject: ``dispatch.replica.start.<executor>``
    (DISPATCH, a work queue)."""

    type: Literal["dispatch.replica.start"] = "dispatch.replica.start"
    executor_id: ExecutorId = Field(description="The executor the scheduler placed it on.")
    replica: ReplicaKey = Field(description="The attempt to start.")
    project: ProjectId = Field(description="The job's project.")
    location: LocationId = Field(description="The job's location.")
    launch: ReplicaLaunch = Field(description="What to run, and how.")
    run_token: SecretStr = Field(
        description="An API token that may write to the job's run only; revoked when the job "
        "ends. The DISPATCH stream keeps it until the executor takes the command."
    )
    deadline: datetime = Field(description="When the job times out (kill the attempt then).")

    @field_serializer("run_token", when_used="json")
    def _reveal(self, token: SecretStr) -> str:
        return token.get_secret_value()

    def partition(self) -> str:
        """The executor: the last subject token."""
        return self.executor_id


class StopReplica(Envelope):
    """Command: stop one replica attempt (SIGTERM, grace, SIGKILL). Subject:
    ``dispatch.replica.stop.<executor>``."""

    type: Literal["dispatch.replica.stop"] = "dispatch.replica.stop"
    executor_id: ExecutorId = Field(description="The executor running it.")
    replica: ReplicaKey = Field(description="The attempt to stop.")
    reason: Literal["cancelled", "timeout", "restart", "superseded", "failed", "completed"] = Field(
        description="Why: the job was cancelled, timed out, is restarting every replica, "
        "the attempt is not the current one, the job failed, or the job succeeded (its "
        "chief exited 0) while this replica still ran."
    )
    grace_seconds: float = Field(
        default=30.0, ge=0, le=3600, description="Between SIGTERM and SIGKILL."
    )

    def partition(self) -> str:
        """The executor: the last subject token."""
        return self.executor_id


class ReplicaStarted(Envelope):
    """An executor started a replica attempt. Subject: ``training.replica.started.<job>``."""

    type: Literal["training.replica.started"] = "training.replica.started"
    replica: ReplicaKey = Field(description="The attempt.")
    executor_id: ExecutorId = Field(description="Who runs it.")
    host: str = Field(default="", max_length=255, description="Where (host name or pod).")
    started_at: datetime = Field(description="When the process (or pod) started.")

    def partition(self) -> str:
        """The job: the last subject token."""
        return self.replica.job_id


ExitReason = Literal["exited", "killed", "lost", "setup_failed", "rejected"]
"""How an attempt ended: its process exited, it was stopped on purpose, its executor lost
it, it never got going (package install, bad image), or the executor refused it."""


class ReplicaExited(Envelope):
    """A replica attempt ended. Subject: ``training.replica.exited.<job>``."""

    type: Literal["training.replica.exited"] = "training.replica.exited"
    replica: ReplicaKey = Field(description="The attempt.")
    executor_id: ExecutorId = Field(description="Who ran it.")
    reason: ExitReason = Field(description="How it ended.")
    exit_code: int | None = Field(
        default=None, description="The exit status (128+n for signal n); None if unknown."
    )
    message: str = Field(
        default="", max_length=8000, description="Why, and the last lines of stderr."
    )
    ended_at: datetime = Field(description="When it ended.")

    def partition(self) -> str:
        """The job: the last subject token."""
        return self.replica.job_id


class ExecutorAnnounced(Envelope):
    """An executor is alive, with what it has and what it runs. Core NATS only (it repeats
    every ``interval_seconds``): ``executors.announced.<executor>``."""

    type: Literal["executors.announced"] = "executors.announced"
    executor_id: ExecutorId = Field(description="The executor.")
    backend: Literal["local", "ray", "kubernetes"] = Field(description="Where it runs replicas.")
    address: str = Field(description="The host name or IP other replicas reach its replicas at.")
    capacity: Resources = Field(description="Everything it can run at once.")
    first_port: int = Field(ge=1, le=65535, description="First port it gives replicas.")
    port_count: int = Field(ge=1, le=65535, description="How many ports, from first_port.")
    running: list[ReplicaKey] = Field(
        default_factory=list, description="The attempts it is running now."
    )
    interval_seconds: float = Field(gt=0, description="When to expect the next one.")

    def partition(self) -> str:
        """The executor: the last subject token."""
        return self.executor_id


class CustomJobCreated(Envelope):
    """A custom job was created; its run is to be created with the same id. Subject:
    ``training.job.created.<job>``."""

    type: Literal["training.job.created"] = "training.job.created"
    job_id: RunId = Field(description="The job's id, which its run takes.")
    project: ProjectId = Field(description="The job's project.")
    location: LocationId = Field(description="The job's location.")
    job: CustomJob = Field(description="The job as created.")
    run_set: str = Field(
        default="training-jobs", description="The run set (jobSpec.experiment, or the default)."
    )
    trial: TrialOfJob | None = Field(
        default=None, description="Set when the job is a trial of a tuning job."
    )

    def partition(self) -> str:
        """The job: the last subject token."""
        return self.job_id


class CustomJobStateChanged(Envelope):
    """A custom job moved between states. Subject: ``training.job.state_changed.<job>``."""

    type: Literal["training.job.state_changed"] = "training.job.state_changed"
    job_id: RunId = Field(description="The job (and its run).")
    project: ProjectId = Field(description="The job's project.")
    location: LocationId = Field(description="The job's location.")
    previous_state: JobState = Field(description="The state before.")
    state: JobState = Field(description="The state now.")
    error: RpcStatus | None = Field(default=None, description="Why it failed or was cancelled.")
    restarts: int = Field(default=0, ge=0, description="Replica restarts so far.")

    def partition(self) -> str:
        """The job: the last subject token."""
        return self.job_id

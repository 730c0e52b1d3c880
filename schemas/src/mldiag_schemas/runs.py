"""The run resource (Google ML Diagnostics' shape), its requests, and the facts published
about runs.
"""

import enum
from datetime import datetime
from typing import Literal

from pydantic import Field, JsonValue, model_validator

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId
from mldiag_schemas.monitoring import MonitoringRules


class RunState(enum.StrEnum):
    """Output-only state of a run (Google ML Diagnostics' names)."""

    ACTIVE = "STATE_ACTIVE"
    COMPLETED = "STATE_COMPLETED"
    FAILED = "STATE_FAILED"


class RunPhase(enum.StrEnum):
    """The settable phase of a run; ``state`` mirrors it."""

    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    @property
    def state(self) -> RunState:
        """The output state this phase puts the run in."""
        return RunState(f"STATE_{self.value}")

    @property
    def terminal(self) -> bool:
        """Whether a run in this phase has ended."""
        return self is not RunPhase.ACTIVE

    @classmethod
    def of(cls, state: RunState) -> "RunPhase":
        """The phase a state mirrors."""
        return cls(state.value.removeprefix("STATE_"))


class Orchestrator(enum.StrEnum):
    """What runs the workload."""

    UNSPECIFIED = "ORCHESTRATOR_UNSPECIFIED"
    GCE = "GCE"
    GKE = "GKE"
    SLURM = "SLURM"
    CUSTOM = "CUSTOM"
    LOCAL = "LOCAL"


class Configs(Contract):
    """A run's configuration. Values keep their JSON types (numbers stay numbers)."""

    software_configs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Framework, versions, XLA flags, ..."
    )
    hardware_configs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Device type, slices, devices per slice, ..."
    )
    user_configs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Anything the user records (hyperparameters, ...)."
    )


class Artifacts(Contract):
    """Where a run's artifacts (profiles, checkpoints) live."""

    gcs_path: str = Field(
        default="", max_length=2048, description="Storage URL: gs://, file://, s3://, ..."
    )


class GkeWorkload(Contract):
    """A Kubernetes workload."""

    id: str = Field(default="", description="Workload id.")
    kind: str = Field(default="", description="Workload kind (JobSet, Job, ...).")
    cluster: str = Field(default="", description="Cluster name.")
    namespace: str = Field(default="", description="Kubernetes namespace.")
    parent_workload: str = Field(default="", description="Owning workload, if any.")
    labels: dict[str, str] = Field(default_factory=dict, description="Workload labels.")


class SlurmWorkload(Contract):
    """A Slurm job."""

    job_id: str = Field(default="", description="Slurm job id.")
    cluster: str = Field(default="", description="Slurm cluster name.")
    partition: str = Field(default="", description="Partition the job runs in.")
    user: str = Field(default="", description="User who submitted the job.")


class CustomWorkload(Contract):
    """A workload under any other orchestrator."""

    id: str = Field(default="", description="Workload id.")
    display_name: str = Field(default="", description="Human-readable name.")
    create_time: datetime | None = Field(default=None, description="When it was created.")


class WorkloadTarget(Contract):
    """One host of the workload."""

    display_name: str = Field(default="", description="Human-readable name.")
    hostname: str = Field(default="", description="Host name.")
    instance_id: str = Field(default="", description="VM or node instance id.")
    zone: str = Field(default="", description="Zone or site.")
    state: str = Field(default="", description="The host's state as its orchestrator says.")


class WorkloadDetails(Contract):
    """The workload a run belongs to: at most one of gke, slurm, custom; plus its hosts."""

    gke: GkeWorkload | None = Field(default=None, description="A GKE workload.")
    slurm: SlurmWorkload | None = Field(default=None, description="A Slurm job.")
    custom: CustomWorkload | None = Field(default=None, description="Any other workload.")
    targets: list[WorkloadTarget] = Field(
        default_factory=list, max_length=10_000, description="The workload's hosts."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> "WorkloadDetails":
        kinds = [kind for kind in (self.gke, self.slurm, self.custom) if kind is not None]
        if len(kinds) > 1:
            raise ValueError("set at most one of gke, slurm and custom")
        return self


class ErrorDetails(Contract):
    """Why a run failed."""

    code: str | None = Field(default=None, description="Error code or exception type.")
    message: str = Field(default="", max_length=10_000, description="What went wrong.")
    reason: str | None = Field(default=None, description="Short machine-readable reason.")
    stack_trace: str | None = Field(
        default=None, max_length=100_000, description="Stack trace, if there was one."
    )


class RunMetricsSummary(Contract):
    """Output-only averages over the run's metrics.

    Filled in by the metrics part of the registry; null until it has computed them.
    """

    avg_step_time: float | None = Field(default=None, description="Mean step time (s).")
    avg_mfu: float | None = Field(default=None, description="Mean MFU (%).")
    avg_throughput: float | None = Field(default=None, description="Mean throughput (1/s).")
    avg_latency: float | None = Field(default=None, description="Mean latency (s).")


class CreateRunRequest(Contract):
    """Body of `POST .../machineLearningRuns`: the run's settable fields and its id."""

    run_id: RunId | None = Field(
        default=None, description="Id to give the run; a random UUID when absent."
    )
    display_name: str = Field(min_length=1, max_length=200, description="Human-readable name.")
    run_set: str = Field(
        default="default", min_length=1, max_length=200, description="Group of related runs."
    )
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=64, description="Free-form labels."
    )
    configs: Configs = Field(default_factory=Configs, description="The run's configuration.")
    artifacts: Artifacts = Field(default_factory=Artifacts, description="Artifact location.")
    orchestrator: Orchestrator = Field(
        default=Orchestrator.UNSPECIFIED, description="What runs the workload."
    )
    workload_details: WorkloadDetails = Field(
        default_factory=WorkloadDetails, description="The workload and its hosts."
    )
    run_phase: RunPhase = Field(default=RunPhase.ACTIVE, description="Initial phase.")
    error_details: ErrorDetails | None = Field(
        default=None, description="Why it failed (with runPhase FAILED)."
    )
    monitoring: MonitoringRules = Field(
        default_factory=MonitoringRules,
        description="Overrides of the detection rules for this run (docs/monitoring.md).",
    )
    workload_id: str = Field(
        default="", max_length=500, description="Workload identity; a resume must match it."
    )
    logical_id: str = Field(
        default="", max_length=200, description="Client-side identity used for upserts."
    )


class UpdateRunRequest(Contract):
    """Body of `PATCH .../machineLearningRuns/{run}`.

    Only the fields named by ``updateMask`` (default: the settable fields present) change.
    Output-only fields may be sent back as read (a GET, edited, PATCHed) and are ignored.
    """

    etag: str = Field(default="", description="The etag read; required unless upserting.")
    display_name: str | None = Field(
        default=None, min_length=1, max_length=200, description="Human-readable name."
    )
    run_set: str | None = Field(
        default=None, min_length=1, max_length=200, description="Group of related runs."
    )
    labels: dict[str, str] | None = Field(
        default=None, max_length=64, description="Labels (replaces all)."
    )
    configs: Configs | None = Field(default=None, description="Configuration (replaces all).")
    artifacts: Artifacts | None = Field(default=None, description="Artifact location.")
    orchestrator: Orchestrator | None = Field(default=None, description="Orchestrator.")
    workload_details: WorkloadDetails | None = Field(default=None, description="Workload.")
    run_phase: RunPhase | None = Field(
        default=None, description="New phase; COMPLETED/FAILED end the run, ACTIVE resumes it."
    )
    error_details: ErrorDetails | None = Field(default=None, description="Why it failed.")
    monitoring: MonitoringRules | None = Field(
        default=None, description="Overrides of the detection rules (replaces all)."
    )
    workload_id: str | None = Field(
        default=None, max_length=500, description="Workload identity; a resume must match it."
    )
    logical_id: str | None = Field(
        default=None, max_length=200, description="Client-side identity for upserts."
    )
    # Output-only, accepted and ignored.
    name: str | None = Field(default=None, description="Output-only; ignored.")
    run_id: str | None = Field(default=None, description="Output-only; ignored.")
    state: RunState | None = Field(default=None, description="Output-only; ignored.")
    create_time: datetime | None = Field(default=None, description="Output-only; ignored.")
    update_time: datetime | None = Field(default=None, description="Output-only; ignored.")
    end_time: datetime | None = Field(default=None, description="Output-only; ignored.")
    delete_time: datetime | None = Field(default=None, description="Output-only; ignored.")
    metrics: RunMetricsSummary | None = Field(default=None, description="Output-only; ignored.")
    cluster_id: str | None = Field(default=None, description="Output-only; ignored.")
    creator: str | None = Field(default=None, description="Output-only; ignored.")


class Run(Contract):
    """A machine-learning run."""

    name: str = Field(
        description="Resource name: projects/{p}/locations/{l}/machineLearningRuns/{r}."
    )
    run_id: RunId = Field(description="The last segment of the name.")
    display_name: str = Field(description="Human-readable name.")
    run_set: str = Field(description="Group of related runs.")
    labels: dict[str, str] = Field(description="Free-form labels.")
    configs: Configs = Field(default_factory=Configs, description="The run's configuration.")
    artifacts: Artifacts = Field(default_factory=Artifacts, description="Artifact location.")
    orchestrator: Orchestrator = Field(
        default=Orchestrator.UNSPECIFIED, description="What runs the workload."
    )
    workload_details: WorkloadDetails = Field(
        default_factory=WorkloadDetails, description="The workload and its hosts."
    )
    run_phase: RunPhase = Field(default=RunPhase.ACTIVE, description="Settable phase.")
    state: RunState = Field(description="Output-only state, mirroring runPhase.")
    etag: str = Field(default="", description="Output-only; changes on every update.")
    create_time: datetime = Field(description="When the run was created.")
    update_time: datetime = Field(description="When the run last changed.")
    end_time: datetime | None = Field(
        default=None, description="When the run reached COMPLETED or FAILED."
    )
    delete_time: datetime | None = Field(
        default=None, description="When the run was (soft) deleted; deleted runs are not served."
    )
    error_details: ErrorDetails | None = Field(default=None, description="Why it failed.")
    monitoring: MonitoringRules = Field(
        default_factory=MonitoringRules, description="Overrides of the detection rules."
    )
    workload_id: str = Field(default="", description="Workload identity (resume must match).")
    logical_id: str = Field(default="", description="Client-side identity used for upserts.")
    cluster_id: str = Field(default="", description="Cluster the workload runs on.")
    creator: str = Field(default="", description="Who created it (e.g. CREATOR_MANUAL).")
    metrics: RunMetricsSummary = Field(
        default_factory=RunMetricsSummary, description="Output-only metric averages."
    )


class ListRunsResponse(Contract):
    """A page of runs."""

    machine_learning_runs: list[Run] = Field(description="The runs on this page.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")


class SelfHostedWorkload(Contract):
    """The ``workload`` object of the official SDK's self-hosted contract."""

    workload_id: str | None = Field(default=None, max_length=500, description="Workload id.")
    display_name: str | None = Field(default=None, max_length=200, description="Its name.")
    state: Literal["STATE_RUNNING", "STATE_SUCCEEDED", "STATE_FAILED"] | None = Field(
        default=None, description="Workload state: RUNNING → ACTIVE, SUCCEEDED → COMPLETED."
    )


class SelfHostedRunRequest(Contract):
    """Body the official ``google-cloud-mldiagnostics`` SDK PATCHes (``DIAGON_BASE_URL``)."""

    model_config = Contract.model_config | {"extra": "ignore"}

    name: str | None = Field(default=None, description="`machineLearningRuns/{id}`.")
    logical_id: str | None = Field(
        default=None, max_length=200, description="Deterministic id of the workload's run."
    )
    display_name: str | None = Field(default=None, max_length=200, description="Run name.")
    creator: str | None = Field(default=None, max_length=100, description="CREATOR_MANUAL.")
    cluster_id: str | None = Field(default=None, max_length=200, description="Cluster id.")
    base_blob_path: str | None = Field(default=None, max_length=2048, description="gcs_path.")
    workload: SelfHostedWorkload | None = Field(default=None, description="The workload.")


class SelfHostedRun(Contract):
    """What the official SDK reads back: it adopts ``name``'s last segment and ``clusterId``."""

    name: str = Field(description="`machineLearningRuns/{id}`.")
    logical_id: str = Field(description="The logical id the run was upserted on.")
    display_name: str = Field(description="Run name.")
    creator: str = Field(description="Who created it.")
    cluster_id: str = Field(description="Cluster id.")
    base_blob_path: str = Field(description="Artifact location.")
    workload: SelfHostedWorkload = Field(description="The workload and its state.")
    create_time: datetime = Field(description="When the run was created.")
    update_time: datetime = Field(description="When the run last changed.")


class RunCreated(Envelope):
    """A run was created. Subject: ``runs.run.created.<run id>``."""

    type: Literal["runs.run.created"] = "runs.run.created"
    run: Run = Field(description="The run as created.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run.run_id


class RunUpdated(Envelope):
    """A run's fields changed. Subject: ``runs.run.updated.<run id>``."""

    type: Literal["runs.run.updated"] = "runs.run.updated"
    run: Run = Field(description="The run after the update.")
    update_mask: list[str] = Field(description="The fields the update changed (camelCase).")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run.run_id


class RunPhaseChanged(Envelope):
    """A run moved between phases (ended, failed, resumed). Subject:
    ``runs.run.phase_changed.<run id>``.
    """

    type: Literal["runs.run.phase_changed"] = "runs.run.phase_changed"
    run: Run = Field(description="The run after the change.")
    previous_phase: RunPhase = Field(description="The phase before.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run.run_id


class RunDeleted(Envelope):
    """A run was (soft) deleted. Subject: ``runs.run.deleted.<run id>``."""

    type: Literal["runs.run.deleted"] = "runs.run.deleted"
    run: Run = Field(description="The run as deleted (deleteTime set).")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run.run_id


class RunConfigsReported(Envelope):
    """A workload reported configs for its run (the official SDK's ``mlrun_configs`` OTLP
    log record). Subject: ``telemetry.configs.received.<run id>``.

    The registry merges each non-empty section into the run's configs, key by key (a
    reported key replaces the stored one). ``event_id`` is derived from the content, so a
    re-exported record dedupes; applying one twice changes nothing either way.
    """

    type: Literal["telemetry.configs.received"] = "telemetry.configs.received"
    run_id: RunId = Field(description="The run the configs belong to.")
    configs: Configs = Field(description="The reported sections (empty ones are left alone).")
    source: str = Field(default="otlp", max_length=50, description="Where they came from.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class ConfigEntry(Contract):
    """One leaf of a run's configs: nested objects flattened to a dotted key."""

    section: Literal["softwareConfigs", "hardwareConfigs", "userConfigs"] = Field(
        description="The configs section it is in."
    )
    key: str = Field(description="Dotted path inside the section (`optimizer.lr`).")
    value: JsonValue = Field(description="The value, with its JSON type.")


class FlatConfigsResponse(Contract):
    """A run's configs flattened for display, sorted by section then key."""

    run: str = Field(description="The run's resource name.")
    entries: list[ConfigEntry] = Field(description="Every leaf, in order.")


class ConfigChange(enum.StrEnum):
    """How a key differs between the base run and the other run."""

    ADDED = "ADDED"
    REMOVED = "REMOVED"
    CHANGED = "CHANGED"
    UNCHANGED = "UNCHANGED"


class ConfigDifference(Contract):
    """One dotted key compared between two runs."""

    section: Literal["softwareConfigs", "hardwareConfigs", "userConfigs"] = Field(
        description="The configs section."
    )
    key: str = Field(description="Dotted path inside the section.")
    change: ConfigChange = Field(description="ADDED: only in other; REMOVED: only in base.")
    base_value: JsonValue = Field(default=None, description="The value in the base run.")
    other_value: JsonValue = Field(default=None, description="The value in the other run.")


class ConfigsDiffResponse(Contract):
    """How the other run's configs differ from the base run's (numbers compare by value:
    ``1`` equals ``1.0``, ``true`` does not equal ``1``, NaN equals NaN).
    """

    base: str = Field(description="The base run's resource name.")
    other: str = Field(description="The other run's resource name.")
    differences: list[ConfigDifference] = Field(
        description="Differing keys (all keys with `includeUnchanged`), by section and key."
    )

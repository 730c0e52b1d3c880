"""A custom job's run: created when the job is, its phase following the job's state (no SQL,
no bus client here).

The run takes the job's id, so everything recorded by the job's replicas (metrics,
heartbeats, signals, profiles) lands on it, and the training scheduler places the job only
once the run's ``RunCreated`` is out (the run service publishes it after commit).

Field mapping (docs: ``docs/training-design.md``):

- ``displayName``: ``jobSpec.experimentRun``, else the job's ``displayName``;
- ``runSet``: the message's run set (``jobSpec.experiment`` or ``training-jobs``);
- ``labels``: the job's labels, plus ``mldiag-job: custom-job``, ``mldiag-job-state`` (the
  job's state, lower case, without ``JOB_STATE_``) and ``mldiag-job-restarts`` (replica
  restarts so far) while the 64-label limit leaves room;
- ``orchestrator``: ``CUSTOM``; ``workloadId`` and ``workloadDetails.custom.id``: the job's
  resource name (``projects/{p}/locations/{l}/customJobs/{id}``), ``custom.displayName``
  and ``custom.createTime``: the job's;
- ``configs.softwareConfigs.customJob``: what each pool runs (image or environment,
  command and args or package and module, the names of its environment variables, never
  their values), scheduling and the output directory; ``configs.hardwareConfigs.workerPools``:
  each pool's machine type, accelerators and replica count.

A trial of a tuning job (``CustomJobCreated.trial``) gets, besides, ``userConfigs`` = the
trial's hyperparameters with ``trial_id`` and ``tuning_job_id``, and the labels
``mldiag-tuning-job: <tuning job id>`` and ``mldiag-trial: <trial id>``; its run set is the
message's (the study's display name). A tuning job's own run (the study's) is
:mod:`mldiag_run_registry.jobs.tuning`'s.

Phases: ``JOB_STATE_SUCCEEDED`` → ``COMPLETED``; ``FAILED``, ``CANCELLED`` and ``EXPIRED``
→ ``FAILED`` with ``errorDetails``: ``code`` the google.rpc code name of the job's error
(``CANCELLED`` for a cancel, so a cancelled run never reads as a crash), ``reason``
``JOB_FAILED`` / ``JOB_CANCELLED`` / ``JOB_EXPIRED``, ``message`` the job's error message.
Other states keep the run ACTIVE. A run that has ended keeps its phase whatever comes later
(terminal phases are sticky), and a message applied twice changes nothing.
"""

from typing import Any, Protocol

import structlog
from pydantic import JsonValue, ValidationError

from mldiag_platform.errors import InvalidArgument, Unavailable
from mldiag_run_registry.lookup import RunFinder
from mldiag_run_registry.runs.errors import EtagMismatch, RunAlreadyExists, RunNotYetCreated
from mldiag_schemas.jobs import (
    POOL_ROLES,
    CustomJob,
    CustomJobSpec,
    JobState,
    RpcStatus,
    WorkerPoolSpec,
)
from mldiag_schemas.operations import Operation
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_schemas.runs import (
    Configs,
    CreateRunRequest,
    CustomWorkload,
    ErrorDetails,
    Orchestrator,
    Run,
    RunPhase,
    UpdateRunRequest,
    WorkloadDetails,
)
from mldiag_schemas.tuning import TrialOfJob

log = structlog.get_logger(__name__)

JOB_LABEL = "mldiag-job"
"""Marks a job's run; its value is the kind of job."""
JOB_KIND = "custom-job"
TUNING_KIND = "tuning-job"
"""``mldiag-job`` of a tuning job's (a study's) run."""
KIND_WORDS = {JOB_KIND: "custom job", TUNING_KIND: "hyperparameter tuning job"}
STATE_LABEL = "mldiag-job-state"
"""The job's state, e.g. ``running``, ``succeeded``, ``cancelled``."""
RESTARTS_LABEL = "mldiag-job-restarts"
"""Replica restarts so far (a number)."""
TUNING_JOB_LABEL = "mldiag-tuning-job"
"""On a study's run and on each of its trials' runs: the tuning job's id."""
TRIAL_LABEL = "mldiag-trial"
"""On a trial's run: the trial's id in its study."""
MAX_LABELS = 64
"""A run's label limit (the job's own labels come first)."""

_UPDATE_ATTEMPTS = 5

RPC_CODE_NAMES: dict[int, str] = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}
"""google.rpc.Code names by number (a job's ``error.code``)."""

_ENDINGS: dict[JobState, tuple[RunPhase, str]] = {
    JobState.SUCCEEDED: (RunPhase.COMPLETED, ""),
    JobState.FAILED: (RunPhase.FAILED, "JOB_FAILED"),
    JobState.CANCELLED: (RunPhase.FAILED, "JOB_CANCELLED"),
    JobState.EXPIRED: (RunPhase.FAILED, "JOB_EXPIRED"),
}
"""The run phase (and errorDetails.reason) each terminal job state ends the run in."""


class RunWriter(Protocol):
    """What a job's run needs from the run resource (``RunService``)."""

    async def create_run(self, project: str, location: str, request: CreateRunRequest) -> Operation:
        """Create a run and publish ``RunCreated`` after commit."""
        ...

    async def update_run(
        self,
        project: str,
        location: str,
        run_id: str,
        body: UpdateRunRequest,
        update_mask: str | None,
        *,
        allow_missing: bool = False,
    ) -> Operation:
        """Apply the masked fields if the etag is current."""
        ...


def job_name(project: str, location: str, job_id: str) -> str:
    """The job's resource name."""
    return f"projects/{project}/locations/{location}/customJobs/{job_id}"


def state_label(state: JobState) -> str:
    """A job state as a label value (``JOB_STATE_RUNNING`` → ``running``)."""
    return state.value.removeprefix("JOB_STATE_").lower()


def with_job_labels(labels: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``labels`` with mldiag's job labels set, each only while the limit leaves room (the
    user's own labels are never dropped to make space)."""
    merged = dict(labels)
    for key, value in extra.items():
        if key in merged or len(merged) < MAX_LABELS:
            merged[key] = value
    return merged


def _pool_software(position: int, pool: WorkerPoolSpec) -> dict[str, JsonValue]:
    summary: dict[str, JsonValue] = {"pool": position, "role": POOL_ROLES[position]}
    if pool.container_spec is not None:
        spec = pool.container_spec
        summary |= {
            "imageUri": spec.image_uri,
            "command": list(spec.command),
            "args": list(spec.args),
            "env": [var.name for var in spec.env],
        }
    elif pool.python_package_spec is not None:
        package = pool.python_package_spec
        summary |= {
            "executorImageUri": package.executor_image_uri,
            "packageUris": list(package.package_uris),
            "pythonModule": package.python_module,
            "args": list(package.args),
            "env": [var.name for var in package.env],
        }
    return summary


def _pool_hardware(position: int, pool: WorkerPoolSpec) -> dict[str, JsonValue]:
    machine = pool.machine_spec
    hardware: dict[str, JsonValue] = {
        "pool": position,
        "role": POOL_ROLES[position],
        "replicaCount": pool.replica_count,
        "machineType": machine.machine_type if machine else "",
    }
    if machine is not None and machine.accelerator_count:
        hardware |= {
            "acceleratorType": machine.accelerator_type.value,
            "acceleratorCount": machine.accelerator_count,
        }
    if pool.disk_spec is not None:
        hardware |= {
            "bootDiskType": pool.disk_spec.boot_disk_type,
            "bootDiskSizeGb": pool.disk_spec.boot_disk_size_gb,
        }
    return hardware


def job_configs(job: CustomJob) -> Configs:
    """What the job runs, and on what, as the run's configs (skipped positions left out)."""
    return spec_configs(job.job_spec, "customJob")


def spec_configs(spec: CustomJobSpec, key: str) -> Configs:
    """What ``spec`` runs, and on what: ``softwareConfigs.<key>`` and ``hardwareConfigs``."""
    pools = [
        (position, pool) for position, pool in enumerate(spec.worker_pool_specs) if not pool.empty
    ]
    software: dict[str, JsonValue] = {
        "workerPools": [_pool_software(position, pool) for position, pool in pools],
    }
    if spec.scheduling is not None:
        software["scheduling"] = spec.scheduling.model_dump(mode="json", by_alias=True)
    if spec.base_output_directory is not None:
        software["baseOutputDirectory"] = spec.base_output_directory.output_uri_prefix
    return Configs(
        software_configs={key: software},
        hardware_configs={
            "workerPools": [_pool_hardware(position, pool) for position, pool in pools],
            "replicaCount": sum(pool.replica_count for _, pool in pools),
        },
    )


def job_run_request(message: CustomJobCreated) -> CreateRunRequest:
    """The create request of a job's run (see the module's mapping)."""
    job = message.job
    name = job.name or job_name(message.project, message.location, message.job_id)
    extra = {
        JOB_LABEL: JOB_KIND,
        STATE_LABEL: state_label(
            JobState.QUEUED if job.state is JobState.UNSPECIFIED else job.state
        ),
    }
    configs = job_configs(job)
    run_set = message.run_set or "training-jobs"
    if message.trial is not None:
        trial = message.trial
        extra |= {TUNING_JOB_LABEL: trial.tuning_job_id, TRIAL_LABEL: label_value(trial.trial_id)}
        configs.user_configs.update(trial_configs(trial))
        run_set = message.run_set or trial.study_display_name
    try:
        return CreateRunRequest(
            run_id=message.job_id,
            display_name=job.job_spec.experiment_run or job.display_name,
            run_set=run_set,
            labels=with_job_labels(dict(job.labels), extra),
            configs=configs,
            orchestrator=Orchestrator.CUSTOM,
            workload_details=WorkloadDetails(
                custom=CustomWorkload(
                    id=name,
                    display_name=job.display_name,
                    create_time=job.create_time or message.occurred_at,
                )
            ),
            workload_id=name,
        )
    except ValidationError as error:  # a job the training API accepted always fits a run
        raise InvalidArgument(
            f"job {message.job_id}'s run would not be valid: {error.errors()[0]['msg']}"
        ) from None


def label_value(text: str) -> str:
    """``text`` as a label value (lower case, ``[a-z0-9_-]``, at most 63 characters)."""
    cleaned = "".join(
        c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in text.lower()
    )
    return cleaned[:63]


def trial_configs(trial: TrialOfJob) -> dict[str, JsonValue]:
    """A trial's run's userConfigs: its hyperparameters, its id and its study's."""
    configs: dict[str, JsonValue] = dict(trial.parameters)
    configs |= {"trial_id": trial.trial_id, "tuning_job_id": trial.tuning_job_id}
    return configs


def ending(
    state: JobState, error: RpcStatus | None, what: str = "custom job"
) -> tuple[RunPhase, ErrorDetails | None]:
    """The run phase a job state puts the run in, and why it failed (``what``: the kind of
    job, in words)."""
    phase, reason = _ENDINGS.get(state, (RunPhase.ACTIVE, ""))
    if phase is not RunPhase.FAILED:
        return phase, None
    default_code = 1 if state is JobState.CANCELLED else 4 if state is JobState.EXPIRED else 2
    code = error.code if error is not None else default_code
    words = {
        JobState.FAILED: f"the {what} failed",
        JobState.CANCELLED: f"the {what} was cancelled",
        JobState.EXPIRED: f"the {what} expired",
    }[state]
    return phase, ErrorDetails(
        code=RPC_CODE_NAMES.get(code, str(code)),
        reason=reason,
        message=(error.message if error is not None and error.message else words)[:10_000],
    )


class JobRunsService:
    """Creates each job's run and keeps its phase and job labels in step with the job."""

    def __init__(self, runs: RunWriter, finder: RunFinder) -> None:
        self._runs = runs
        self._finder = finder

    async def job_created(self, message: CustomJobCreated) -> None:
        """Create the job's run; a run of that id already there is left as it is."""
        await self.create_job_run(
            message.project, message.location, job_run_request(message), JOB_KIND
        )

    async def create_job_run(
        self, project: str, location: str, request: CreateRunRequest, kind: str
    ) -> None:
        """Create a job's run (``kind``: the ``mldiag-job`` label); a run of that id already
        there is left as it is."""
        run_id = request.run_id or ""
        try:
            await self._runs.create_run(project, location, request)
        except RunAlreadyExists:
            found = await self._finder.find_run(run_id)
            job_run = found is not None and found[2].labels.get(JOB_LABEL) == kind
            # A redelivery finds its own run (its RunCreated went out with the first commit);
            # anything else holding the id is not touched, and said out loud.
            log.log(20 if job_run else 30, "job.run_exists", run_id=run_id, job_run=job_run)
            return
        log.info("job.run_created", run_id=run_id, kind=kind, project=project, location=location)

    async def job_state_changed(self, message: CustomJobStateChanged) -> None:
        """Mirror the job's state into its run (phase, errorDetails, job labels).

        ``RunNotYetCreated`` (retried) while the run is unknown.
        """
        await self.mirror_state(
            message.job_id, message.state, message.error, restarts=message.restarts
        )

    async def mirror_state(
        self,
        run_id: str,
        state: JobState,
        error: RpcStatus | None,
        *,
        restarts: int = 0,
        kind: str = JOB_KIND,
    ) -> None:
        """Bring the run of job ``run_id`` (a ``kind`` of job) in step with its state.

        ``RunNotYetCreated`` (retried) while the run is unknown.
        """
        for _attempt in range(_UPDATE_ATTEMPTS):  # lose no race with another writer
            found = await self._finder.find_run(run_id)
            if found is None:
                raise RunNotYetCreated(f"job {run_id}'s run is not (yet) registered")
            project, location, run = found
            if run.delete_time is not None:
                log.info("job.state_dropped", run_id=run.run_id, reason="run deleted")
                return
            if run.run_phase.terminal:
                # Sticky: an ended run stays as it ended (late or repeated messages).
                log.info("job.state_ignored", run_id=run.run_id, phase=run.run_phase.value)
                return
            body, mask = _changes(run, state, error, restarts, kind)
            if not mask:
                return
            try:
                await self._runs.update_run(project, location, run.run_id, body, ",".join(mask))
            except EtagMismatch:
                continue
            log.info(
                "job.state_mirrored",
                run_id=run.run_id,
                state=state.value,
                phase=body.run_phase.value if body.run_phase else run.run_phase.value,
                restarts=restarts,
            )
            return
        raise Unavailable(f"job {run_id}'s run kept changing while its state was mirrored")


def _restarts(run: Run) -> int:
    text = run.labels.get(RESTARTS_LABEL, "0")
    return int(text) if text.isdigit() else 0


def _changes(
    run: Run, state: JobState, error: RpcStatus | None, restarts: int, kind: str
) -> tuple[UpdateRunRequest, list[str]]:
    """The update that brings ``run`` in step with the job's state, and its mask (empty:
    none)."""
    fields: dict[str, Any] = {"etag": run.etag}
    mask: list[str] = []
    extra = {JOB_LABEL: kind, STATE_LABEL: state_label(state)}
    restarts = max(_restarts(run), restarts)  # a late message never lowers it
    if restarts:
        extra[RESTARTS_LABEL] = str(restarts)
    labels = with_job_labels(run.labels, extra)
    if labels != run.labels:
        fields["labels"] = labels
        mask.append("labels")
    phase, details = ending(state, error, KIND_WORDS.get(kind, "job"))
    if phase is not run.run_phase:
        fields["run_phase"] = phase
        mask.append("runPhase")
        if details is not None:
            fields["error_details"] = details
            mask.append("errorDetails")
    return UpdateRunRequest(**fields), mask

"""Streams, subjects and durable consumer names: the bus's shared vocabulary.

Subjects are ``<context>.<entity>.<event>`` (past tense for facts). Messages about a run
carry the run id as the last token so that stateful consumers can partition by run.
A deployment namespace (default ``mldiag``) prefixes every subject and stream so that
several installations, or test runs, can share one NATS server.
"""

from dataclasses import dataclass
from typing import Literal

DEFAULT_NAMESPACE = "mldiag"
"""The namespace an installation uses unless configured otherwise."""


@dataclass(frozen=True)
class StreamSpec:
    """A JetStream stream, before the namespace is applied."""

    name: str
    subjects: tuple[str, ...]
    description: str
    max_age_seconds: float = 7 * 24 * 3600.0
    duplicate_window_seconds: float = 120.0
    retention: Literal["limits", "workqueue"] = "limits"
    """``workqueue``: a message is removed once a consumer acks it (commands to executors)."""


TELEMETRY = StreamSpec(
    name="TELEMETRY",
    subjects=("telemetry.>",),
    description="Metric points and other telemetry accepted by ingestion.",
)
RUNS = StreamSpec(
    name="RUNS",
    subjects=("runs.>",),
    description="Facts about runs (created, updated, phase changed, deleted).",
)
EVENTS = StreamSpec(
    name="EVENTS",
    subjects=("events.>",),
    description="Workload events opened and resolved by the event-detector.",
)
ANALYSES = StreamSpec(
    name="ANALYSES",
    subjects=("analyses.>",),
    description="Analyses of workload events produced by the analyzer.",
)
PROFILING = StreamSpec(
    name="PROFILING",
    subjects=("profiling.>",),
    description="XProf instances and profile sessions.",
)
TRAINING = StreamSpec(
    name="TRAINING",
    subjects=("training.>",),
    description="Facts about training jobs and their replicas.",
)
DISPATCH = StreamSpec(
    name="DISPATCH",
    subjects=("dispatch.>",),
    description="Commands to executors (start and stop replicas), one subject per executor.",
    retention="workqueue",
)
DEADLETTER = StreamSpec(
    name="DEADLETTER",
    subjects=("deadletter.>",),
    description="Messages a consumer gave up on, with the reason in the headers.",
    max_age_seconds=30 * 24 * 3600.0,
)

ALL_STREAMS: tuple[StreamSpec, ...] = (
    TELEMETRY,
    RUNS,
    EVENTS,
    ANALYSES,
    PROFILING,
    TRAINING,
    DISPATCH,
    DEADLETTER,
)
"""Every stream an installation declares."""

# Subjects, without namespace; the run id is appended as the last token.
METRICS_RECEIVED = "telemetry.metrics.received"
"""Subject prefix of :class:`~mldiag_schemas.telemetry.MetricPointsReceived`."""
METRICS_INGEST = "telemetry.metrics.ingest"
"""Subject prefix of :class:`~mldiag_schemas.telemetry.IngestMetrics`: in-cluster publishers'
door to ingestion (JetStream, so the publisher's ack means stored)."""
HEARTBEAT_RECEIVED = "telemetry.heartbeat.received"
"""Subject prefix of :class:`~mldiag_schemas.telemetry.RunHeartbeat`."""
SIGNAL_RECEIVED = "telemetry.signal.received"
"""Subject prefix of :class:`~mldiag_schemas.telemetry.WorkloadSignalReported`."""
CONFIGS_RECEIVED = "telemetry.configs.received"
"""Subject prefix of :class:`~mldiag_schemas.runs.RunConfigsReported`."""
LOGS_RECEIVED = "telemetry.logs.received"
"""Subject prefix of :class:`~mldiag_schemas.logs.LogLinesReceived` (a run's log lines)."""
RUN_CREATED = "runs.run.created"
"""Subject prefix of :class:`~mldiag_schemas.runs.RunCreated`."""
RUN_UPDATED = "runs.run.updated"
"""Subject prefix of :class:`~mldiag_schemas.runs.RunUpdated`."""
RUN_PHASE_CHANGED = "runs.run.phase_changed"
"""Subject prefix of :class:`~mldiag_schemas.runs.RunPhaseChanged`."""
RUN_DELETED = "runs.run.deleted"
"""Subject prefix of :class:`~mldiag_schemas.runs.RunDeleted`."""
MONITORING_RULES_CHANGED = "runs.monitoring.changed"
"""Subject prefix of :class:`~mldiag_schemas.monitoring.MonitoringRulesChanged` (last token:
the project)."""
WORKLOAD_EVENT_OPENED = "events.workload.opened"
"""Subject prefix of :class:`~mldiag_schemas.events.WorkloadEventOpened`."""
WORKLOAD_EVENT_UPDATED = "events.workload.updated"
"""Subject prefix of :class:`~mldiag_schemas.events.WorkloadEventUpdated`."""
WORKLOAD_EVENT_RESOLVED = "events.workload.resolved"
"""Subject prefix of :class:`~mldiag_schemas.events.WorkloadEventResolved`."""
WORKLOAD_EVENTS = "events.workload"
"""Prefix of every event-life subject (``events.workload.*.<run id>``)."""
ANALYSIS_COMPLETED = "analyses.analysis.completed"
"""Subject prefix of :class:`~mldiag_schemas.analyses.AnalysisCompleted`."""
PROFILE_CAPTURE_REQUESTED = "profiling.capture.requested"
"""Subject prefix of :class:`~mldiag_schemas.profiling.ProfileCaptureRequested`."""
CAPTURE_PROFILE = "profiling.capture.start"
"""Subject prefix of :class:`~mldiag_schemas.profiling.CaptureProfile` (a command)."""
PROFILE_CAPTURE_FINISHED = "profiling.capture.finished"
"""Subject prefix of :class:`~mldiag_schemas.profiling.ProfileCaptureFinished`."""
PROFILER_SESSION_REPORTED = "profiling.session.reported"
"""Subject prefix of :class:`~mldiag_schemas.profiling.ProfilerSessionReported`."""
PROFILER_SESSION_CHANGED = "profiling.session.changed"
"""Subject prefix of :class:`~mldiag_schemas.profiling.ProfilerSessionChanged`."""
XPROF_INSTANCE_CHANGED = "profiling.instance.changed"
"""Subject prefix of :class:`~mldiag_schemas.profiling.XProfInstanceChanged`."""
JOB_CREATED = "training.job.created"
"""Subject prefix of :class:`~mldiag_schemas.replicas.CustomJobCreated` (last token: the job)."""
JOB_STATE_CHANGED = "training.job.state_changed"
"""Subject prefix of :class:`~mldiag_schemas.replicas.CustomJobStateChanged`."""
TUNING_JOB_CREATED = "training.tuning.created"
"""Subject prefix of :class:`~mldiag_schemas.tuning.TuningJobCreated` (last token: the job)."""
TUNING_JOB_STATE_CHANGED = "training.tuning.state_changed"
"""Subject prefix of :class:`~mldiag_schemas.tuning.TuningJobStateChanged`."""
TRIAL_ENDED = "training.trial.ended"
"""Subject prefix of :class:`~mldiag_schemas.tuning.TrialEnded` (last token: the trial's job)."""
REPLICA_STARTED = "training.replica.started"
"""Subject prefix of :class:`~mldiag_schemas.replicas.ReplicaStarted` (last token: the job)."""
REPLICA_EXITED = "training.replica.exited"
"""Subject prefix of :class:`~mldiag_schemas.replicas.ReplicaExited` (last token: the job)."""
START_REPLICA = "dispatch.replica.start"
"""Subject prefix of :class:`~mldiag_schemas.replicas.StartReplica` (last token: the executor)."""
STOP_REPLICA = "dispatch.replica.stop"
"""Subject prefix of :class:`~mldiag_schemas.replicas.StopReplica` (last token: the executor)."""
EXECUTOR_ANNOUNCED = "executors.announced"
"""Subject prefix of :class:`~mldiag_schemas.replicas.ExecutorAnnounced`: core NATS only, in no
stream (it repeats every few seconds)."""
CONSOLE_UPDATED = "console.updated"
"""Subject prefix of :class:`~mldiag_schemas.sharing.RunUpdate`: core NATS only, in no stream
(hints for live pages, not facts to keep)."""
DEADLETTER_PREFIX = "deadletter"
"""Dead-lettered messages are republished under ``deadletter.<original subject>``."""

TOKEN_DIRECTORY_BUCKET = "auth_tokens"  # noqa: S105  # a bucket name
"""Key-value bucket of API token grants (key: the secret's hash). run-registry owns the
tokens and writes it; every service with endpoints reads it to authorise requests."""

# Durable consumer names, one per (service, purpose).
REGISTRY_METRICS_DURABLE = "run-registry-metrics"
"""run-registry storing metric points."""
REGISTRY_CONFIGS_DURABLE = "run-registry-configs"
"""run-registry merging reported configs into runs."""
REGISTRY_HEARTBEATS_DURABLE = "run-registry-heartbeats"
"""run-registry keeping the latest heartbeat of every process."""
REGISTRY_EVENTS_DURABLE = "run-registry-events"
"""run-registry storing workload events."""
REGISTRY_ANALYSES_DURABLE = "run-registry-analyses"
"""run-registry storing analyses."""
INGESTION_INGEST_DURABLE = "ingestion-ingest"
"""ingestion validating metric writes published on the bus."""
DETECTOR_METRICS_DURABLE = "event-detector-metrics"
"""event-detector watching metric points."""
DETECTOR_HEARTBEATS_DURABLE = "event-detector-heartbeats"
"""event-detector watching heartbeats (liveness, restarts, fingerprints)."""
DETECTOR_SIGNALS_DURABLE = "event-detector-signals"
"""event-detector watching lifecycle signals (SIGTERM, preemption, exceptions, exits)."""
DETECTOR_CONFIGS_DURABLE = "event-detector-configs"
"""event-detector noting config reports during a run."""
DETECTOR_RUNS_DURABLE = "event-detector-runs"
"""event-detector following run facts (project, overrides, phase) and project rules."""
ANALYZER_EVENTS_DURABLE = "analyzer-events"
"""analyzer analysing workload events."""
REGISTRY_CAPTURE_REQUESTS_DURABLE = "run-registry-capture-requests"
"""run-registry turning capture requests (the analyzer's) into capture commands."""
REGISTRY_SESSIONS_DURABLE = "run-registry-profiler-sessions"
"""run-registry merging session reports and finishing capture operations."""
PROVISIONER_CAPTURES_DURABLE = "xprof-provisioner-captures"
"""xprof-provisioner running capture commands."""
TRAINING_RUNS_DURABLE = "training-runs"
"""training learning that a job's run exists (then its replicas may start)."""
TRAINING_REPLICAS_DURABLE = "training-replicas"
"""training following replica facts (started, exited) to drive jobs' states."""
TRAINING_TRIAL_JOBS_DURABLE = "training-trial-jobs"
"""training's tuning controller following its trials' custom jobs (state changes)."""
TRAINING_TRIAL_METRICS_DURABLE = "training-trial-metrics"
"""training's tuning controller reading trials' metric points (their measurements)."""
TRAINING_PIPELINE_JOBS_DURABLE = "training-pipeline-jobs"
"""training's pipelines following the jobs they run (then importing the model)."""
REGISTRY_LOGS_DURABLE = "run-registry-logs"
"""run-registry storing a run's log lines."""
DETECTOR_LOGS_DURABLE = "event-detector-logs"
"""event-detector keeping the telling log lines of each run as evidence."""
ANALYZER_UPDATES_DURABLE = "analyzer-updates"
"""analyzer re-analysing events whose update carries new context."""
NOTIFIER_EVENTS_DURABLE = "notifier-events"
"""notifier following workload events (opened, resolved)."""
NOTIFIER_ANALYSES_DURABLE = "notifier-analyses"
"""notifier reading analyses (the top cause of an opened event)."""
NOTIFIER_RUNS_DURABLE = "notifier-runs"
"""notifier following run facts (project, location, run set, labels) that rules match on."""
REGISTRY_JOBS_DURABLE = "run-registry-jobs"
"""run-registry creating each job's run and mirroring the job's state into it."""
REGISTRY_TUNING_DURABLE = "run-registry-tuning"
"""run-registry creating each tuning job's (study's) run, mirroring its state and best trial."""
REGISTRY_TRIALS_DURABLE = "run-registry-trials"
"""run-registry recording each ended trial's outcome on its run (``training.trial.>``)."""
EXECUTOR_DURABLE_PREFIX = "executor"
"""An executor's durable on DISPATCH is ``executor-<executor id>`` (it filters on its id)."""


def executor_durable(executor_id: str) -> str:
    """The durable consumer name of executor ``executor_id`` on the DISPATCH work queue."""
    return f"{EXECUTOR_DURABLE_PREFIX}-{executor_id}"


PROVISIONER_SESSIONS_DURABLE = "xprof-provisioner-sessions"
"""xprof-provisioner pre-warming XProf's caches for sessions that landed."""


def stream_of(subject: str) -> StreamSpec:
    """The stream that captures a base subject (by its first token)."""
    context = subject.split(".", 1)[0]
    for spec in ALL_STREAMS:
        if any(pattern.split(".", 1)[0] == context for pattern in spec.subjects):
            return spec
    raise KeyError(f"no stream captures {subject!r}")


@dataclass(frozen=True)
class Namespace:
    """Applies an installation's namespace to subjects, streams and durables."""

    prefix: str = DEFAULT_NAMESPACE

    def subject(self, base: str, *tokens: str) -> str:
        """``<prefix>.<base>[.<token>...]``."""
        return ".".join((self.prefix, base, *tokens))

    def stream(self, spec: StreamSpec) -> str:
        """The namespaced stream name (stream names cannot contain dots)."""
        return f"{self.prefix}_{spec.name}".replace(".", "_").upper()

    def stream_subjects(self, spec: StreamSpec) -> list[str]:
        """The namespaced subjects a stream captures."""
        return [f"{self.prefix}.{subject}" for subject in spec.subjects]

    def bucket(self, name: str) -> str:
        """The namespaced key-value bucket name (bucket names cannot contain dots)."""
        return f"{self.prefix}_{name}".replace(".", "_")

    def durable(self, name: str) -> str:
        """The namespaced durable consumer name."""
        return f"{self.prefix}-{name}".replace(".", "-")

    def base_subject(self, subject: str) -> str:
        """Strip the namespace from a received subject."""
        head = f"{self.prefix}."
        return subject[len(head) :] if subject.startswith(head) else subject

"""Profiles: profiler sessions and targets, captures, and the XProf instances that serve them.

Who does what:

- the SDK (programmatic traces) reports each host's part of a session to the run-registry
  (``POST .../profilerSessions:report``) and registers the run's profiler targets;
- ``POST .../profilerSessions:capture`` (CLI, console) and the analyzer's
  :class:`ProfileCaptureRequested` become a :class:`CaptureProfile` command from the
  run-registry, which knows the targets and owns the operation;
- the xprof-provisioner captures, uploads, and reports the session
  (:class:`ProfilerSessionReported`, per host) and the outcome (:class:`ProfileCaptureFinished`);
- the run-registry merges every report into the session resource and announces it
  (:class:`ProfilerSessionChanged`); the provisioner pre-warms XProf's caches for a session that
  landed.
"""

import enum
import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId

SESSION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A session id names a directory (``plugins/profile/<session>``): no slashes, no leading dot."""

SessionId = Annotated[str, StringConstraints(pattern=SESSION_ID_PATTERN)]
"""A profiler session's id, the last segment of its resource name and its directory name."""

HOST_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"
"""A host name as it appears in ``<host>.xplane.pb``."""

HostName = Annotated[str, StringConstraints(pattern=HOST_PATTERN)]
"""A host of a run (a profiler target's host, a session file's stem)."""

XPLANE_SUFFIX = ".xplane.pb"
"""The file each host contributes to a session: ``<session dir>/<host>.xplane.pb``."""


def session_prefix(run_id: str, session_id: str) -> str:
    """The object-store key prefix of a session: ``<run>/plugins/profile/<session>/``."""
    return f"{run_id}/plugins/profile/{session_id}/"


def session_name(project: str, location: str, run_id: str, session_id: str) -> str:
    """``projects/{p}/locations/{l}/machineLearningRuns/{r}/profilerSessions/{s}``."""
    return (
        f"projects/{project}/locations/{location}/machineLearningRuns/{run_id}"
        f"/profilerSessions/{session_id}"
    )


class ProfilerSessionKind(enum.StrEnum):
    """How a session came to be (the official API's kinds)."""

    PROGRAMMATIC = "PROGRAMMATIC"
    """The workload traced itself (``mldiag.xprof()``)."""
    ON_DEMAND = "ON_DEMAND"
    """Someone asked for a capture (``mldiag profiles capture``)."""
    SNAPSHOT = "SNAPSHOT"
    """The analyzer asked for one to explain a workload event."""


class ProfilerSessionPhase(enum.StrEnum):
    """Phase of one host's part of a session, and of the session as a whole.

    A session is ACTIVE while any host is; then SUCCEEDED when every host succeeded, FAILED
    when any failed (the hosts say which).
    """

    ACTIVE = "ACTIVE"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class TracerLevels(Contract):
    """``jax.profiler.ProfileOptions`` tracer levels (the official capture flags)."""

    host_tracer_level: int = Field(
        default=2, ge=0, le=3, description="0 off, 1 user events, 2 + high-level, 3 verbose."
    )
    device_tracer_level: int = Field(default=1, ge=0, le=1, description="0 off, 1 on.")
    python_tracer_level: int = Field(
        default=0, ge=0, le=1, description="0 off, 1 on (large traces)."
    )


class ProfilerSessionHost(Contract):
    """One host's part of a session."""

    host: HostName = Field(description="The host (its file is `<host>.xplane.pb`).")
    phase: ProfilerSessionPhase = Field(description="ACTIVE, SUCCEEDED or FAILED.")
    start_time: datetime | None = Field(default=None, description="When its trace began.")
    end_time: datetime | None = Field(default=None, description="When it ended.")
    file_uri: str = Field(default="", description="Its `.xplane.pb` in object storage.")
    size_bytes: int = Field(default=0, ge=0, description="Size of that file.")
    error: str = Field(default="", max_length=4000, description="Why it FAILED, if it did.")


class ProfilerSession(Contract):
    """A profile of a run: one directory of per-host xplanes (the official resource's fields)."""

    name: str = Field(
        description="projects/{p}/locations/{l}/machineLearningRuns/{r}/profilerSessions/{s}."
    )
    session_id: SessionId = Field(description="The last segment; also the directory name.")
    run_id: RunId = Field(description="The run profiled.")
    kind: ProfilerSessionKind = Field(description="PROGRAMMATIC, ON_DEMAND or SNAPSHOT.")
    phase: ProfilerSessionPhase = Field(description="Derived from the hosts' phases.")
    hosts: list[ProfilerSessionHost] = Field(
        default_factory=list, description="Per host, sorted by host."
    )
    duration_seconds: float | None = Field(default=None, ge=0, description="Trace length.")
    tracer_levels: TracerLevels = Field(
        default_factory=TracerLevels, description="The tracer levels of the trace."
    )
    storage_folder_uri: str = Field(
        default="", description="`<artifacts root>/<run>/plugins/profile/<session>`."
    )
    dashboard_uri: str = Field(
        default="", description="Shareable link: opens the session in managed XProf."
    )
    auto_captured: bool = Field(default=False, description="Captured for a workload event.")
    monitored_events: list[uuid.UUID] = Field(
        default_factory=list, description="Workload events this session explains."
    )
    operation: str = Field(default="", description="The capture operation, if one made it.")
    prewarmed: bool = Field(
        default=False, description="XProf's caches (overview, trace viewer) are in storage."
    )
    create_time: datetime = Field(description="First report.")
    update_time: datetime = Field(description="Latest report.")
    end_time: datetime | None = Field(default=None, description="When no host was ACTIVE.")


class ListProfilerSessionsResponse(Contract):
    """A page of a run's (or a project's) sessions, newest first."""

    profiler_sessions: list[ProfilerSession] = Field(description="The sessions on this page.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")


class ProfilerSessionReport(Contract):
    """One host's news about a session; body of ``POST .../profilerSessions:report``.

    Reports merge by host (the newest ``update_time`` wins per host), so any order and any
    number of repeats give the same session.
    """

    session_id: SessionId = Field(description="The session (shared by every host).")
    kind: ProfilerSessionKind = Field(
        default=ProfilerSessionKind.PROGRAMMATIC, description="How the session came to be."
    )
    host: HostName = Field(description="The reporting host.")
    phase: ProfilerSessionPhase = Field(description="This host's phase now.")
    start_time: datetime | None = Field(default=None, description="When its trace began.")
    end_time: datetime | None = Field(default=None, description="When it ended.")
    duration_seconds: float | None = Field(default=None, ge=0, description="Trace length.")
    tracer_levels: TracerLevels = Field(
        default_factory=TracerLevels, description="The tracer levels of the trace."
    )
    file_uri: str = Field(default="", max_length=2000, description="The host's uploaded xplane.")
    size_bytes: int = Field(default=0, ge=0, description="Size of that file.")
    storage_folder_uri: str = Field(
        default="", max_length=2000, description="The session's folder in object storage."
    )
    error: str = Field(default="", max_length=4000, description="Why it FAILED.")
    workload_event_id: uuid.UUID | None = Field(
        default=None, description="The workload event it explains (SNAPSHOT)."
    )
    operation: str = Field(default="", max_length=300, description="The capture operation.")
    prewarmed: bool = Field(default=False, description="The provisioner stored XProf's caches.")
    update_time: datetime | None = Field(
        default=None, description="When this was true (default: on receipt)."
    )


class ProfilerTarget(Contract):
    """A workload process's profiler server (``jax.profiler.start_server``)."""

    name: str = Field(
        description="projects/{p}/locations/{l}/machineLearningRuns/{r}/profilerTargets/{t}."
    )
    target_id: str = Field(description="`<host>-<processIndex>`.")
    run_id: RunId = Field(description="The run whose process it is.")
    host: HostName = Field(description="The host (session files are named after it).")
    process_index: int = Field(default=0, ge=0, description="The process's index in the job.")
    address: str = Field(description="`host:port` the provisioner connects to.")
    pid: int = Field(default=0, ge=0, description="The process id (0: unknown).")
    register_time: datetime = Field(description="First registration.")
    update_time: datetime = Field(description="Latest registration (a restart re-registers).")


class RegisterProfilerTargetRequest(Contract):
    """Body of ``POST .../machineLearningRuns/{run}/profilerTargets``."""

    host: HostName = Field(description="The host (session files are named after it).")
    process_index: int = Field(default=0, ge=0, description="The process's index in the job.")
    address: str = Field(
        max_length=300,
        pattern=r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$",
        description="`host:port` of the profiler server, reachable from the platform.",
    )
    pid: int = Field(default=0, ge=0, description="The process id (0: unknown).")


class ListProfilerTargetsResponse(Contract):
    """A run's profiler targets, by host and process index."""

    profiler_targets: list[ProfilerTarget] = Field(description="The targets.")


class CaptureProfileRequest(Contract):
    """Body of ``POST .../machineLearningRuns/{run}/profilerSessions:capture``."""

    duration_seconds: float = Field(default=2.0, gt=0, le=300, description="Trace length.")
    targets: list[str] = Field(
        default_factory=list,
        max_length=1024,
        description="Hosts (or target ids) to capture; empty: every registered target.",
    )
    tracer_levels: TracerLevels = Field(
        default_factory=TracerLevels, description="The tracer levels of the trace."
    )
    session_id: SessionId | None = Field(
        default=None, description="Name the session (default: `ondemand-<time>`)."
    )


class CaptureTarget(Contract):
    """One profiler server a capture connects to."""

    host: HostName = Field(description="The host (its file is `<host>.xplane.pb`).")
    address: str = Field(description="`host:port`.")


class XProfInstanceState(enum.StrEnum):
    """Lifecycle of an XProf instance."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class StartXProfRequest(Contract):
    """Body of `POST /v1/xprofInstances`: serve the sessions of these runs."""

    run_ids: list[RunId] = Field(
        min_length=1, max_length=64, description="The runs whose sessions the instance serves."
    )


class XProfInstance(Contract):
    """A running (or stopped) XProf server for the sessions of some runs.

    It is never reached directly: ``url`` goes through the provisioner's authenticating proxy.
    """

    name: str = Field(description="Resource name: xprofInstances/{id}.")
    instance_id: str = Field(description="The last segment of the name.")
    run_ids: list[RunId] = Field(
        description="The runs served (XProf's runs are `<run>/<session>`)."
    )
    state: XProfInstanceState = Field(description="Lifecycle state.")
    url: str = Field(default="", description="The instance's UI through the proxy, once RUNNING.")
    port: int = Field(
        default=0, description="XProf's HTTP port (loopback; only the proxy uses it)."
    )
    grpc_port: int = Field(default=0, description="XProf's internal gRPC port.")
    logdir: str = Field(default="", description="The writable local cache of the runs' sessions.")
    memory_bytes: int = Field(default=0, ge=0, description="Resident memory, last measured.")
    memory_limit_bytes: int = Field(
        default=0, ge=0, description="Past this the instance is recycled (0: no cap)."
    )
    recycles: int = Field(default=0, ge=0, description="Times it was restarted for memory.")
    error: str = Field(default="", description="Why it FAILED, if it did.")
    create_time: datetime = Field(description="When it was requested.")
    last_access_time: datetime = Field(description="Last use; idle instances are stopped.")


class ListXProfInstancesResponse(Contract):
    """All known instances."""

    xprof_instances: list[XProfInstance] = Field(description="The instances.")


class XProfInstanceChanged(Envelope):
    """An instance changed state. Subject: ``profiling.instance.changed.<run id>``."""

    type: Literal["profiling.instance.changed"] = "profiling.instance.changed"
    instance: XProfInstance = Field(description="The instance after the change.")

    def partition(self) -> str:
        """The first run served: the last subject token."""
        return self.instance.run_ids[0]


class ProfileCaptureRequested(Envelope):
    """Someone (the analyzer, for an event) asks for a profile of a run.

    Subject: ``profiling.capture.requested.<run id>``. The xprof-provisioner captures from the
    run's profiler targets and registers a session of ``kind`` linked to ``workload_event_id``.
    """

    type: Literal["profiling.capture.requested"] = "profiling.capture.requested"
    run_id: RunId = Field(description="The run to profile.")
    kind: Literal["SNAPSHOT", "ON_DEMAND"] = Field(
        default="SNAPSHOT", description="SNAPSHOT: asked for by an event."
    )
    workload_event_id: uuid.UUID | None = Field(
        default=None, description="The workload event it explains."
    )
    hosts: list[str] = Field(
        default_factory=list, description="Hosts to capture on; empty: every target."
    )
    duration_seconds: float = Field(default=2.0, gt=0, le=300, description="Trace length.")
    reason: str = Field(default="", max_length=1000, description="Why, in words.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class CaptureProfile(Envelope):
    """Command to the xprof-provisioner: capture a run's targets into a session.

    Subject: ``profiling.capture.start.<run id>``. Published by the run-registry (which holds
    the targets and the operation) for ``:capture`` calls and the analyzer's requests.
    """

    type: Literal["profiling.capture.start"] = "profiling.capture.start"
    run_id: RunId = Field(description="The run to capture.")
    session_id: SessionId = Field(description="The session the files land in.")
    kind: ProfilerSessionKind = Field(description="ON_DEMAND or SNAPSHOT.")
    operation: str = Field(description="The operation to finish (its resource name).")
    targets: list[CaptureTarget] = Field(min_length=1, description="Where to capture.")
    duration_seconds: float = Field(gt=0, le=300, description="Trace length.")
    tracer_levels: TracerLevels = Field(
        default_factory=TracerLevels, description="The tracer levels of the trace."
    )
    workload_event_id: uuid.UUID | None = Field(
        default=None, description="The workload event it explains (SNAPSHOT)."
    )

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class ProfilerSessionReported(Envelope):
    """The provisioner's news about one host of a session it captured.

    Subject: ``profiling.session.reported.<run id>``; the run-registry merges it exactly as it
    merges an SDK's ``:report`` call.
    """

    type: Literal["profiling.session.reported"] = "profiling.session.reported"
    run_id: RunId = Field(description="The run profiled.")
    report: ProfilerSessionReport = Field(description="One host's news.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class ProfileCaptureFinished(Envelope):
    """A capture ended. Subject: ``profiling.capture.finished.<run id>``.

    ``error_code`` set: the operation failed with that code (``capture_failed``, ``target_busy``,
    ``targets_missing``, ``upload_failed``); ``missing_hosts`` names requested hosts that
    produced no file.
    """

    type: Literal["profiling.capture.finished"] = "profiling.capture.finished"
    run_id: RunId = Field(description="The run captured.")
    session_id: SessionId = Field(description="The session the capture filled.")
    operation: str = Field(description="The capture operation to finish.")
    error_code: str = Field(default="", description="Stable code when it failed.")
    error_message: str = Field(
        default="", max_length=4000, description="What went wrong, for people."
    )
    missing_hosts: list[str] = Field(
        default_factory=list, description="Requested hosts that produced no file."
    )

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.run_id


class ProfilerSessionChanged(Envelope):
    """The run-registry's session resource after a merge. Subject:
    ``profiling.session.changed.<run id>``; dashboards and the provisioner's pre-warm follow it."""

    type: Literal["profiling.session.changed"] = "profiling.session.changed"
    session: ProfilerSession = Field(description="The session after the merge.")

    def partition(self) -> str:
        """The run id: the last subject token."""
        return self.session.run_id

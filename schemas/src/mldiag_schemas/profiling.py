"""XProf instances managed by the xprof-provisioner."""

import enum
import uuid
from datetime import datetime
from typing import Literal

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import RunId


class XProfInstanceState(enum.StrEnum):
    """Lifecycle of an XProf instance."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


class StartXProfRequest(Contract):
    """Body of `POST /v1/xprofInstances`: serve one run's profiles."""

    run_id: RunId = Field(description="The run whose profile directory XProf serves.")


class XProfInstance(Contract):
    """A running (or stopped) XProf server for one run's profiles."""

    name: str = Field(description="Resource name: xprofInstances/{id}.")
    instance_id: str = Field(description="The last segment of the name.")
    run_id: RunId = Field(description="The run served.")
    state: XProfInstanceState = Field(description="Lifecycle state.")
    url: str = Field(default="", description="Where XProf answers, once RUNNING.")
    port: int = Field(default=0, description="XProf's HTTP port.")
    grpc_port: int = Field(default=0, description="XProf's internal gRPC port.")
    logdir: str = Field(default="", description="The writable copy of the run's profiles.")
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
        """The run id: the last subject token."""
        return self.instance.run_id


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

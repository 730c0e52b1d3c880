"""An XProf instance as the provisioner keeps it in memory, and a proxied request's lease
on it."""

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import structlog

from mldiag_schemas.profiling import XProfInstance, XProfInstanceState
from mldiag_xprof_provisioner.instances.backend import XProfProcess


@dataclass(eq=False)
class InstanceRecord:
    """One instance: its runs, port, copy, process and state, and its start or stop in hand."""

    instance_id: str
    run_ids: tuple[str, ...]
    port: int
    directory: Path
    create_time: datetime
    last_access_time: datetime
    log: structlog.stdlib.BoundLogger
    owner: str
    """The caller that started it (a token id): whose per-caller limit it counts against."""
    secret: str = field(repr=False)
    """What XProf wants on every request (see ``child.py``); never logged nor returned."""
    state: XProfInstanceState = XProfInstanceState.STARTING
    url: str = ""
    error: str = ""
    end_time: datetime | None = None
    process: XProfProcess | None = None
    memory_bytes: int = 0
    memory_limit_bytes: int = 0
    recycles: int = 0
    in_flight: int = 0
    """Proxied requests being answered: the instance is in use and must not be recycled."""
    # Both tasks are awaited with asyncio.wait by any number of callers: a caller that goes
    # away (a client disconnecting) never cancels a half-done start or stop. ``startup``
    # also carries a memory recycle, which is a start on the same logdir.
    startup: "asyncio.Task[None] | None" = None
    stopping: "asyncio.Task[None] | None" = None
    closing: bool = False
    """The teardown has begun: nothing more is written into the copy."""
    writes: "set[asyncio.Future[None]]" = field(default_factory=set)
    """Writes into the copy running in threads, which the teardown waits for."""

    @property
    def name(self) -> str:
        return f"xprofInstances/{self.instance_id}"

    @property
    def logdir(self) -> Path:
        return self.directory / "logdir"

    def serves(self, run_ids: Iterable[str]) -> bool:
        return set(run_ids) <= set(self.run_ids)

    def snapshot(self) -> XProfInstance:
        return XProfInstance(
            name=self.name,
            instance_id=self.instance_id,
            run_ids=list(self.run_ids),
            state=self.state,
            url=self.url,
            port=self.port,
            grpc_port=0,  # no gRPC worker: see child
            logdir=str(self.logdir),
            memory_bytes=self.memory_bytes,
            memory_limit_bytes=self.memory_limit_bytes,
            recycles=self.recycles,
            error=self.error,
            create_time=self.create_time,
            last_access_time=self.last_access_time,
        )


class Lease:
    """A proxied request's hold on a RUNNING instance: where to send it, which runs it may
    name; while held the instance counts as in use. ``release`` is idempotent."""

    def __init__(self, record: InstanceRecord, clock: Callable[[], datetime]) -> None:
        self._record = record
        self._clock = clock
        self._released = False
        record.in_flight += 1
        record.last_access_time = clock()

    @property
    def instance_id(self) -> str:
        """The instance's id."""
        return self._record.instance_id

    @property
    def port(self) -> int:
        """XProf's loopback HTTP port."""
        return self._record.port

    @property
    def run_ids(self) -> tuple[str, ...]:
        """The runs the instance serves."""
        return self._record.run_ids

    @property
    def secret(self) -> str:
        """What the proxy presents to XProf."""
        return self._record.secret

    def release(self) -> None:
        """The request is answered: a long answer counts as use until its end."""
        if not self._released:
            self._released = True
            self._record.in_flight -= 1
            self._record.last_access_time = self._clock()

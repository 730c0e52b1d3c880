"""Fakes for the provisioner's tests: a launcher with scripted XProfs, a recording
publisher, a settable clock, and a World that wires them to a FileStore over a temp dir."""

import asyncio
import itertools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from mldiag_platform.storage import FileStore
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.profiling import XProfInstanceChanged, XProfInstanceState
from mldiag_xprof_provisioner.errors import XProfStartFailed
from mldiag_xprof_provisioner.instances.backend import LaunchSpec
from mldiag_xprof_provisioner.instances.service import Started, XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

STARTING, RUNNING, STOPPED, FAILED = (
    XProfInstanceState.STARTING,
    XProfInstanceState.RUNNING,
    XProfInstanceState.STOPPED,
    XProfInstanceState.FAILED,
)
Behaviour = Literal["ready", "exit", "hang", "gated"]
ALICE, BOB = "token-alice", "token-bob"
"""Callers (token ids): instances count against the caller that started them."""
_pids = itertools.count(10_000)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.published: list[Envelope] = []
        self.fail = fail

    async def publish_many(self, messages: Sequence[Envelope]) -> None:
        if self.fail:
            raise ConnectionError("nats is down")
        self.published.extend(messages)

    def states(self, instance_id: str | None = None) -> list[XProfInstanceState]:
        return [
            m.instance.state
            for m in self.published
            if isinstance(m, XProfInstanceChanged)
            and (instance_id is None or m.instance.instance_id == instance_id)
        ]


class FakeProcess:
    def __init__(self, spec: LaunchSpec, behaviour: Behaviour, gate: asyncio.Event) -> None:
        self.spec = spec
        self.pid = next(_pids)
        self.behaviour = behaviour
        self.gate = gate
        self.exit_status: int | None = None
        self.stops = 0
        self.rss = 100 * 1024 * 1024
        # What the copy held when XProf was launched: the copy must come first.
        self.files_at_launch = sorted(
            p.relative_to(spec.logdir).as_posix() for p in spec.logdir.rglob("*") if p.is_file()
        )

    @property
    def returncode(self) -> int | None:
        return self.exit_status

    async def wait_ready(self) -> None:
        if self.behaviour == "exit":
            self.exit_status = 1
            raise XProfStartFailed("XProf exited with status 1 before answering. Log tail:\nboom")
        if self.behaviour == "hang":
            await asyncio.Event().wait()
        if self.behaviour == "gated":
            await self.gate.wait()

    async def stop(self, grace: float) -> int | None:  # noqa: ARG002
        self.stops += 1
        if self.exit_status is None:
            self.exit_status = -15
        return self.exit_status

    def memory_bytes(self) -> int:
        return self.rss if self.exit_status is None else 0

    def log_tail(self) -> str:
        return "Traceback: something broke"


class FakeLauncher:
    def __init__(self) -> None:
        self.busy_ports: set[int] = set()
        self.alive_pids: set[int] = set()
        self.launched: list[FakeProcess] = []
        self.behaviour: Behaviour = "ready"
        self.gate = asyncio.Event()

    def port_is_free(self, port: int) -> bool:
        return port not in self.busy_ports

    def is_alive(self, pid: int) -> bool:
        return pid in self.alive_pids

    async def launch(self, spec: LaunchSpec) -> FakeProcess:
        process = FakeProcess(spec, self.behaviour, self.gate)
        self.launched.append(process)
        return process


class World:
    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        publish_fails = overrides.pop("publish_fails", False)
        self.store = FileStore(tmp_path / "storage")
        self.settings = XProfProvisionerSettings(
            work_dir=tmp_path / "work",
            first_instance_port=9100,
            instance_port_count=overrides.pop("instance_port_count", 20),
            max_instances=overrides.pop("max_instances", 4),
            # As many as the service holds, unless a test is about the per-caller limit.
            max_instances_per_caller=overrides.pop("max_instances_per_caller", 4),
            idle_timeout_seconds=overrides.pop("idle_timeout_seconds", 60.0),
            startup_timeout_seconds=overrides.pop("startup_timeout_seconds", 5.0),
            memory_limit_bytes=overrides.pop("memory_limit_bytes", 4 * 1024**3),
            public_url="https://mldiag.example",
            **overrides,
        )
        self.recorder = Recorder(fail=publish_fails)
        self.launcher = FakeLauncher()
        self.clock = Clock()
        self.service = XProfProvisioner(
            self.settings, self.store, self.recorder, self.launcher, self.clock
        )

    async def start(self, run_ids: Sequence[str], caller: str = ALICE) -> Started:
        """``service.start``, first giving a run with no profile a session with one host's
        xplane (instances are started only for runs with data)."""
        for run_id in run_ids:
            if is_run_id(run_id) and not await self.store.list(f"{run_id}/plugins/profile/"):
                await self.store.put(f"{run_id}/plugins/profile/s0/h0.xplane.pb", b"xplane")
        return await self.service.start(run_ids, caller)

"""The Ray backend: replica attempts on an existing Ray cluster, gang-placed per job.

- **Placement.** The first ``StartReplica`` of a job opens a *gang*: the job's replicas
  that ``CLUSTER_SPEC`` puts at this executor's address (one port each). Once their
  commands are all in (or ``gang_wait_seconds`` passed), one detached placement group is
  made for the job, a bundle per replica with what its machine spec asks for (CPU,
  memory, GPU, ``accelerator_type:<T>``), strategy ``PACK`` by default. It lives as long as
  the job has attempts here (plus ``group_linger_seconds``): every later attempt of a
  replica (a restart) goes into the same bundle, so it lands on the same node, and only
  once the previous attempt's actor is gone (a replica never runs twice).
- **Addresses.** The scheduler knows one address per executor; the placement group knows
  each bundle's node before any process starts. Each attempt's environment is rewritten
  (:mod:`mldiag_executor.backends.addresses`): ``<executor address>:<port>`` becomes
  ``<node IP>:<port>`` for every replica of the gang, so ``CLUSTER_SPEC``, ``TF_CONFIG``,
  ``MASTER_ADDR`` and ``JAX_COORDINATOR_ADDRESS`` name the nodes the replicas run on.
- **Attempts.** Each is a detached named actor (``<job>-p<pool>-i<index>-a<attempt>`` in
  the namespace ``mldiag-executor-<id>``) that spawns the launcher in a session of its
  own on its node, writes stdout/stderr to the attempt's log files, kills it at the
  deadline, and answers ``wait`` with the exit. Stop: SIGTERM to the process group, the
  grace, SIGKILL; ``ray.kill`` if the actor does not answer. The actor outlives its
  process until the exit is reported (that is how an executor restart finds it), and
  the executor itself (it is detached): a restarted executor lists the namespace's
  actors and re-attaches.

``import ray`` happens only here, when the backend connects: an executor configured for
Ray on a machine without it fails with :class:`RayMissing`.
"""

import asyncio
import contextlib
import importlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import structlog
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_executor import attempts
from mldiag_executor.backends.addresses import Slot, local_slots, rewrite_addresses
from mldiag_executor.backends.base import BackendName, PreparedLaunch, ReplicaExit
from mldiag_executor.backends.ray_process import ReplicaProcess
from mldiag_executor.errors import Rejected
from mldiag_executor.launch import Storage, attempt_name
from mldiag_platform.errors import MldiagError
from mldiag_schemas.replicas import ExitReason, ReplicaKey, Resources, StartReplica

if TYPE_CHECKING:
    from mldiag_executor.settings import ExecutorSettings

log = structlog.get_logger(__name__)

NAMESPACE_PREFIX = "mldiag-executor-"
GROUP_PREFIX = "mldiag-job-"
ACTOR_CALL_SECONDS = 30.0
"""How long a control call to an attempt's actor may take before it counts as lost."""

# Vertex's accelerator names and Ray's ``accelerator_type:<T>`` resources
# (ray.util.accelerators), both ways.
_RAY_ACCELERATORS = {
    "NVIDIA_TESLA_K80": "K80",
    "NVIDIA_TESLA_P4": "P4",
    "NVIDIA_TESLA_P100": "P100",
    "NVIDIA_TESLA_V100": "V100",
    "NVIDIA_TESLA_T4": "T4",
    "NVIDIA_L4": "L4",
    "NVIDIA_TESLA_A100": "A100",
    "NVIDIA_A100_80GB": "A100-80G",
    "NVIDIA_H100_80GB": "H100",
    "NVIDIA_H100_MEGA_80GB": "H100",
    "NVIDIA_H200_141GB": "H200",
}
_VERTEX_ACCELERATORS = {ray_name: vertex for vertex, ray_name in _RAY_ACCELERATORS.items()}
_VERTEX_ACCELERATORS["H100"] = "NVIDIA_H100_80GB"


class RayMissing(MldiagError):
    """The executor is configured for Ray, and ``ray`` is not installed."""

    code = "ray_missing"
    retryable = False


class RayBackendSettings(BaseSettings):
    """How the executor uses a Ray cluster (env ``MLDIAG_EXECUTOR_RAY_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_EXECUTOR_RAY_", frozen=True)

    address: str = Field(
        default="auto",
        description="The cluster to join (``ray.init(address=…)``): ``auto`` finds the one "
        "this machine runs, or ``<head ip>:<gcs port>``.",
    )
    node_ip_address: str = Field(
        default="",
        description="This machine's address in the cluster, when Ray would guess wrong "
        "(several interfaces; a cluster on loopback addresses).",
    )
    strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        default="PACK", description="How a job's placement group spreads its replicas."
    )
    gang_wait_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long a job's first commands wait for the rest of its replicas "
        "here before the placement group is made with what came.",
    )
    placement_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        description="How long a job's placement group may stay unplaced before its "
        "replicas fail (setup_failed: the cluster has no nodes that fit them).",
    )
    group_linger_seconds: float = Field(
        default=120.0,
        ge=0,
        description="How long a job's placement group outlives its last attempt here when "
        "that attempt failed (its restart comes back to the same nodes within it); a job "
        "whose last attempt exited 0 or was stopped frees its group at once.",
    )
    refresh_seconds: float = Field(
        default=5.0, gt=0, description="Seconds between two reads of the cluster's resources."
    )


def import_ray() -> ModuleType:
    """``ray``, or :class:`RayMissing` saying how to get it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise RayMissing(
            "MLDIAG_EXECUTOR_BACKEND=ray needs Ray on the executor's interpreter: "
            "pip install 'ray[default]' (the version the cluster runs)"
        ) from exc


def ray_resources(resources: Resources) -> dict[str, float]:
    """A replica's request as Ray resources (a placement group bundle): ``CPU``,
    ``memory``, ``GPU`` and ``accelerator_type:<T>`` (a tiny amount, Ray's convention)."""
    bundle: dict[str, float] = {"CPU": max(resources.cpus, 0.01)}
    if resources.memory_bytes:
        bundle["memory"] = float(resources.memory_bytes)
    if resources.accelerator_count:
        if resources.accelerator_type.startswith("TPU"):
            bundle["TPU"] = float(resources.accelerator_count)
        else:
            bundle["GPU"] = float(resources.accelerator_count)
        if resources.accelerator_type and not resources.accelerator_type.startswith("TPU"):
            ray_name = _RAY_ACCELERATORS.get(resources.accelerator_type)
            if ray_name is None:
                raise Rejected(
                    f"accelerator {resources.accelerator_type!r} has no Ray "
                    f"accelerator_type (known: {', '.join(sorted(_RAY_ACCELERATORS))})"
                )
            bundle[f"accelerator_type:{ray_name}"] = 0.001
    return bundle


def cluster_capacity(totals: dict[str, float]) -> Resources:
    """What ``ray.cluster_resources()`` offers, as the executor announces it. With several
    accelerator types the most plentiful is named (one type per executor)."""
    types = {
        key.partition(":")[2]: value
        for key, value in totals.items()
        if key.startswith("accelerator_type:")
    }
    ray_type = max(types, key=lambda name: types[name], default="")
    gpus = int(totals.get("GPU", 0))
    tpus = int(totals.get("TPU", 0))
    if gpus:
        accelerator = _VERTEX_ACCELERATORS.get(ray_type, ray_type)
    elif tpus:
        accelerator = ray_type or "TPU"
    else:
        accelerator = ""
    return Resources(
        cpus=float(totals.get("CPU", 0.0)),
        memory_bytes=int(totals.get("memory", 0)),
        accelerator_type=accelerator,
        accelerator_count=gpus or tpus,
    )


def key_of(actor_name: str) -> ReplicaKey | None:
    """The attempt an actor's name (:func:`attempt_name`) stands for; None for others."""
    head, _, attempt = actor_name.rpartition("-a")
    head, _, index = head.rpartition("-i")
    job, _, pool = head.rpartition("-p")
    try:
        return ReplicaKey(job_id=job, pool=int(pool), index=int(index), attempt=int(attempt))
    except ValueError:
        return None


# --- the executor's side ---------------------------------------------------------------------


@dataclass
class _Attempt:
    key: ReplicaKey
    command: StartReplica | None = None
    launch: PreparedLaunch | None = None
    actor: Any = None
    host: str = ""
    stop_reason: str | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    watcher: asyncio.Task[None] | None = None


@dataclass
class _Gang:
    """One job's replicas here and its placement group."""

    job_id: str
    slots: list[Slot]
    first_at: float = field(default_factory=time.monotonic)
    waiting: dict[ReplicaKey, _Attempt] = field(default_factory=dict)
    group: Any = None
    bundles: dict[tuple[int, int], int] = field(default_factory=dict)
    """(pool, index) → bundle index."""
    hosts: dict[int, str] = field(default_factory=dict)
    """port → node IP."""
    forming: asyncio.Task[None] | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    idle_since: float | None = None
    settled: bool = False
    """Its last attempt here ended cleanly (exit 0) or was stopped: no restart will come back
    to these nodes, so the group is freed at once instead of lingering."""


class RayBackend:
    """Replicas as detached actors on a Ray cluster, one placement group per job."""

    name: BackendName = "ray"

    def __init__(
        self,
        *,
        executor_id: str,
        storage: Storage,
        state_dir: Path,
        settings: RayBackendSettings | None = None,
        address: str = "",
        deadline_grace_seconds: float = 10.0,
        launcher: Callable[[str, Path], list[str]] | None = None,
    ) -> None:
        self._executor_id = executor_id
        self._storage = storage
        self._state_dir = state_dir / "ray"
        self._settings = settings or RayBackendSettings()
        self._address = address
        self._deadline_grace = deadline_grace_seconds
        if launcher is None:
            from mldiag_executor.backends.local import launcher_argv  # noqa: PLC0415

            launcher = launcher_argv
        self._launcher = launcher
        self._namespace = f"{NAMESPACE_PREFIX}{executor_id}"
        self._capacity = Resources(cpus=0, memory_bytes=0)
        self._ray: ModuleType | None = None
        self._actor_class: Any = None
        self._attempts: dict[ReplicaKey, _Attempt] = {}
        self._gangs: dict[str, _Gang] = {}
        self._exits: asyncio.Queue[ReplicaExit] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._janitor: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()

    # -- connection ------------------------------------------------------------------------

    async def connect(self) -> None:
        """Join the cluster (once), read its resources, and start the janitor."""
        async with self._connecting:
            if self._ray is not None:
                return
            ray = import_ray()
            await asyncio.to_thread(self._init, ray)
            self._ray = ray
            self._actor_class = ray.remote(max_restarts=0)(ReplicaProcess)
            if not self._address:
                self._address = await asyncio.to_thread(ray.util.get_node_ip_address)
            await self._refresh()
            self._janitor = asyncio.create_task(self._tidy(), name="ray-backend-janitor")
            log.info(
                "executor.ray.connected",
                address=self._settings.address,
                namespace=self._namespace,
                capacity=self._capacity.model_dump(),
            )

    def _init(self, ray: ModuleType) -> None:
        try:
            extra = {"_node_ip_address": ip} if (ip := self._settings.node_ip_address) else {}
            ray.init(
                address=self._settings.address,
                namespace=self._namespace,
                log_to_driver=False,
                logging_level="warning",
                configure_logging=False,
                **extra,
            )
        except ConnectionError as exc:
            raise MldiagError(
                f"cannot join the Ray cluster at {self._settings.address!r}: {exc}"
            ) from exc

    def _ray_module(self) -> ModuleType:
        if self._ray is None:
            raise RuntimeError("the Ray backend is not connected")
        return self._ray

    async def _refresh(self) -> None:
        totals = await asyncio.to_thread(self._ray_module().cluster_resources)
        self._capacity = cluster_capacity(totals)

    # -- what it offers --------------------------------------------------------------------

    def capacity(self) -> Resources:
        """The cluster's total CPU, memory and accelerators (read every few seconds)."""
        return self._capacity

    def address(self) -> str:
        """The address the scheduler writes into replicas' environments; each replica's
        is rewritten to its node's IP before it starts."""
        return self._address or "127.0.0.1"

    def host(self, replica: ReplicaKey) -> str:
        """The IP of the node the attempt runs on ('' before it launched)."""
        attempt = self._attempts.get(replica)
        return attempt.host if attempt else ""

    def running(self) -> list[ReplicaKey]:
        """The attempts waiting for placement or running."""
        return [key for key, a in self._attempts.items() if not a.ended.is_set()]

    # -- starting --------------------------------------------------------------------------

    async def start(self, command: StartReplica, launch: PreparedLaunch) -> None:
        """Record the attempt in its job's gang; the gang places and launches it in the
        background (a failure there comes out of :meth:`exits` as ``setup_failed``)."""
        await self.connect()
        key = launch.key
        if key in self._attempts or await self._actor(key) is not None:
            return  # started before (maybe by a previous executor process)
        ray_resources(launch.resources)  # an unknown accelerator is refused here
        attempt = _Attempt(key=key, command=command, launch=launch)
        self._attempts[key] = attempt
        gang = self._gangs.get(key.job_id)
        if gang is None:
            gang = await self._open_gang(key.job_id, launch)
        gang.idle_since = None
        if gang.group is not None:
            # Into its replica's bundle; one CLUSTER_SPEC did not know when the group was
            # made runs outside the group, wherever Ray finds room.
            self._spawn_task(self._launch(gang, attempt))
            return
        gang.waiting[key] = attempt
        gang.arrived.set()
        if gang.forming is None:
            gang.forming = self._spawn_task(self._form(gang))

    async def _open_gang(self, job_id: str, launch: PreparedLaunch) -> _Gang:
        gang = await self._reopen_gang(job_id)
        if gang is None:
            gang = _Gang(job_id, local_slots(launch.env, self.address(), launch.key, launch.port))
            self._gangs[job_id] = gang
        return gang

    async def _reopen_gang(self, job_id: str) -> _Gang | None:
        """The job's group as an earlier executor process left it, if it is still there."""
        saved = await asyncio.to_thread(self._read_gang, job_id)
        if saved is None:
            return None
        group = await asyncio.to_thread(self._find_group, job_id)
        if group is None:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._gang_file(job_id).unlink)
            return None
        bundles = {(b["pool"], b["index"]): int(b["bundle"]) for b in saved["bundles"]}
        gang = _Gang(job_id, [], group=group, bundles=bundles)
        gang.hosts = {int(port): str(host) for port, host in saved["hosts"].items()}
        self._gangs[job_id] = gang
        return gang

    async def _form(self, gang: _Gang) -> None:
        """Wait for the gang's commands, make its placement group, launch them all."""
        wanted = {(slot.pool, slot.index) for slot in gang.slots}
        until = gang.first_at + self._settings.gang_wait_seconds
        while True:
            present = {(k.pool, k.index) for k in gang.waiting}
            if wanted <= present or time.monotonic() >= until:
                break
            gang.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gang.arrived.wait(), until - time.monotonic())
        members = sorted(gang.waiting.values(), key=lambda a: (a.key.pool, a.key.index))
        members = [a for a in members if a.stop_reason is None]
        if not members:
            gang.forming = None
            return
        try:
            await self._place(gang, members)
        except Exception as exc:  # noqa: BLE001  # every member fails the same way
            gang.forming = None
            for attempt in members:
                gang.waiting.pop(attempt.key, None)
                self._end(attempt, "setup_failed", None, str(exc))
            return
        gang.forming = None
        for attempt in list(gang.waiting.values()):
            gang.waiting.pop(attempt.key, None)
            self._spawn_task(self._launch(gang, attempt))

    async def _place(self, gang: _Gang, members: list[_Attempt]) -> None:
        ray = self._ray_module()
        from ray.util import placement_group  # noqa: PLC0415  # Ray is optional

        bundles = [ray_resources(a.launch.resources) for a in members if a.launch]
        name = f"{GROUP_PREFIX}{gang.job_id}"
        group = await asyncio.to_thread(
            placement_group,
            bundles,
            strategy=self._settings.strategy,
            name=name,
            lifetime="detached",
        )
        try:
            await asyncio.wait_for(group.ready(), self._settings.placement_timeout_seconds)
        except TimeoutError as exc:
            await asyncio.to_thread(ray.util.remove_placement_group, group)
            raise MldiagError(
                f"the Ray cluster found no nodes for the job's {len(bundles)} replicas "
                f"({bundles}, {self._settings.strategy}) within "
                f"{self._settings.placement_timeout_seconds:.0f} s"
            ) from exc
        table = await asyncio.to_thread(ray.util.placement_group_table, group)
        node_ips = await asyncio.to_thread(self._node_ips)
        nodes = table.get("bundles_to_node_id", {})
        gang.group = group
        for position, attempt in enumerate(members):
            if attempt.launch is None:
                continue
            gang.bundles[(attempt.key.pool, attempt.key.index)] = position
            ip = node_ips.get(str(nodes.get(position, "")), "")
            if ip:
                gang.hosts[attempt.launch.port] = ip
        await asyncio.to_thread(self._write_gang, gang)
        log.info(
            "executor.ray.placed",
            job=gang.job_id,
            bundles=len(bundles),
            hosts=sorted(set(gang.hosts.values())),
        )

    def _node_ips(self) -> dict[str, str]:
        return {
            str(node["NodeID"]): str(node["NodeManagerAddress"])
            for node in self._ray_module().nodes()
            if node.get("Alive")
        }

    async def _launch(self, gang: _Gang, attempt: _Attempt) -> None:
        launch, command = attempt.launch, attempt.command
        if launch is None or command is None:
            return
        if attempt.stop_reason is not None:
            self._end(attempt, "killed", None, f"stopped ({attempt.stop_reason}) before it ran")
            return
        from ray.util.scheduling_strategies import (  # noqa: PLC0415  # Ray is optional
            PlacementGroupSchedulingStrategy,
        )

        bundle = ray_resources(launch.resources)
        options: dict[str, Any] = {
            "name": attempt_name(attempt.key),
            "namespace": self._namespace,
            "lifetime": "detached",
            "num_cpus": bundle.pop("CPU"),
            "num_gpus": bundle.pop("GPU", 0),
            "memory": bundle.pop("memory", None),
            "resources": bundle,
        }
        position = gang.bundles.get((attempt.key.pool, attempt.key.index))
        if gang.group is not None and position is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=gang.group,
                placement_group_bundle_index=position,
            )
        try:
            actor = self._actor_class.options(**options).remote(self._spec(command, launch))
            attempt.actor = actor
            env = rewrite_addresses(launch.env, self.address(), gang.hosts)
            where = await actor.launch.remote(env)
        except Exception as exc:  # noqa: BLE001  # the attempt never got going
            log.warning("executor.ray.launch_failed", job=attempt.key.job_id, error=repr(exc))
            self._end(attempt, "setup_failed", None, f"cannot launch on Ray: {exc}")
            return
        attempt.host = str(where.get("host") or "")
        log.info(
            "executor.ray.launched",
            job=attempt.key.job_id,
            replica=attempt.key.replica_name,
            attempt=attempt.key.attempt,
            host=attempt.host,
            pid=where.get("pid"),
        )
        self._watch(attempt)

    def _spec(self, command: StartReplica, launch: PreparedLaunch) -> dict[str, Any]:
        local_logs = self._storage.local_path(launch.logs_uri)
        exit_file = launch.attempt_dir / attempts.EXIT
        return {
            "replica_name": launch.key.replica_name,
            "launcher": self._launcher(launch.key.replica_name, exit_file),
            "argv": launch.argv,
            "exit_file": str(exit_file),
            # File storage is read where it is written: on a shared filesystem the
            # nodes see the same paths (docs/executors.md).
            "log_dir": str(local_logs or launch.attempt_dir / "logs"),
            "working_dir": str(launch.working_dir),
            "notes": launch.notes,
            "deadline": command.deadline.timestamp(),
            "deadline_grace": self._deadline_grace,
        }

    # -- watching --------------------------------------------------------------------------

    def _watch(self, attempt: _Attempt) -> None:
        attempt.watcher = self._spawn_task(self._wait(attempt))

    async def _wait(self, attempt: _Attempt) -> None:
        ray = self._ray_module()
        try:
            result = await attempt.actor.wait.remote()
        except ray.exceptions.RayActorError as exc:
            reason: ExitReason = "killed" if attempt.stop_reason else "lost"
            self._end(attempt, reason, None, f"the attempt's Ray actor died: {exc}"[:2000])
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001  # anything else: the attempt is unknowable
            self._end(attempt, "lost", None, f"cannot follow the attempt: {exc!r}"[:2000])
            return
        stop_reason = attempt.stop_reason or result.get("stop_reason")
        message = str(result.get("message") or "")
        if stop_reason:
            message = f"stopped ({stop_reason})" + (f"\n{message}" if message else "")
        ended_at = datetime.now(UTC)
        with contextlib.suppress(TypeError, ValueError):
            ended_at = datetime.fromisoformat(str(result["ended_at"]))
        code = result.get("exit_code")
        self._end(
            attempt,
            "killed" if stop_reason else "exited",
            int(code) if code is not None else None,
            message,
            ended_at,
        )

    def _end(
        self,
        attempt: _Attempt,
        reason: ExitReason,
        exit_code: int | None,
        message: str,
        ended_at: datetime | None = None,
    ) -> None:
        if attempt.ended.is_set():
            return
        attempt.ended.set()
        gang = self._gangs.get(attempt.key.job_id)
        if gang is not None:
            gang.settled = reason == "killed" or (reason == "exited" and exit_code == 0)
        self._exits.put_nowait(
            ReplicaExit(
                attempt.key, reason, exit_code, message[-8000:], ended_at or datetime.now(UTC)
            )
        )

    # -- stopping --------------------------------------------------------------------------

    async def stop(self, replica: ReplicaKey, grace_seconds: float) -> None:
        """SIGTERM, the grace, SIGKILL (through the actor; ``ray.kill`` if it does not
        answer); returns once the attempt ended."""
        attempt = self._attempts.get(replica)
        if attempt is None or attempt.ended.is_set():
            return
        attempt.stop_reason = attempt.stop_reason or "stopped"
        if attempt.actor is None:
            gang = self._gangs.get(replica.job_id)
            if gang is not None and gang.waiting.pop(replica, None) is not None:
                self._end(attempt, "killed", None, "stopped before it was placed")
            await attempt.ended.wait()
            return
        try:
            await asyncio.wait_for(
                attempt.actor.terminate.remote(grace_seconds), grace_seconds + ACTOR_CALL_SECONDS
            )
        except Exception as exc:  # noqa: BLE001  # a dead or stuck actor: kill it
            log.warning("executor.ray.terminate_failed", job=replica.job_id, error=repr(exc))
            with contextlib.suppress(Exception):
                self._ray_module().kill(attempt.actor, no_restart=True)
        await attempt.ended.wait()

    async def reported(self, replica: ReplicaKey) -> None:
        """The exit is published: the actor goes (its bundle is free for the next
        attempt); the job's group goes with its last attempt here when that one ended
        cleanly or was stopped, else after the linger (a restart comes back to it)."""
        attempt = self._attempts.pop(replica, None)
        actor = attempt.actor if attempt is not None else await self._actor(replica)
        if actor is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._ray_module().kill, actor, no_restart=True)
        await self._remove_idle_groups()

    # -- recovery --------------------------------------------------------------------------

    async def recover(self) -> list[ReplicaKey]:
        """Re-attach to the namespace's actors: those still running are adopted; those
        that ended come out of :meth:`exits`; those never launched are reported lost."""
        await self.connect()
        ray = self._ray_module()
        for job_id in await asyncio.to_thread(self._saved_gangs):
            if job_id not in self._gangs:
                await self._reopen_gang(job_id)
        names = await asyncio.to_thread(ray.util.list_named_actors)
        adopted: list[ReplicaKey] = []
        for name in names:
            key = key_of(str(name))
            if key is None or key in self._attempts:
                continue
            actor = await self._actor(key)
            if actor is None:
                continue
            attempt = _Attempt(key=key, actor=actor)
            self._attempts[key] = attempt
            try:
                state = await asyncio.wait_for(actor.state.remote(), ACTOR_CALL_SECONDS)
            except Exception as exc:  # noqa: BLE001  # an actor that cannot answer is lost
                self._end(attempt, "lost", None, f"cannot reach the attempt's actor: {exc!r}")
                continue
            if not state.get("launched"):
                self._end(attempt, "lost", None, "the executor stopped before it launched")
                continue
            attempt.host = str(state.get("host") or "")
            self._watch(attempt)
            if not state.get("ended"):
                adopted.append(key)
                log.info("executor.replica.adopted", job=key.job_id, host=attempt.host)
        return adopted

    async def _actor(self, key: ReplicaKey) -> Any:
        ray = self._ray_module()
        try:
            return await asyncio.to_thread(
                ray.get_actor, attempt_name(key), namespace=self._namespace
            )
        except ValueError:
            return None

    def _find_group(self, job_id: str) -> Any:
        from ray.util import get_placement_group  # noqa: PLC0415  # Ray is optional

        try:
            return get_placement_group(f"{GROUP_PREFIX}{job_id}")
        except ValueError:
            return None

    def _gang_file(self, job_id: str) -> Path:
        return self._state_dir / f"{job_id}.json"

    def _write_gang(self, gang: _Gang) -> None:
        record = {
            "bundles": [
                {"pool": pool, "index": index, "bundle": bundle}
                for (pool, index), bundle in gang.bundles.items()
            ],
            "hosts": {str(port): host for port, host in gang.hosts.items()},
        }
        attempts.write_record(self._state_dir, f"{gang.job_id}.json", record)

    def _read_gang(self, job_id: str) -> dict[str, Any] | None:
        return attempts.read_record(self._state_dir, f"{job_id}.json")

    def _saved_gangs(self) -> list[str]:
        if not self._state_dir.exists():
            return []
        return sorted(path.stem for path in self._state_dir.glob("*.json"))

    # -- housekeeping ----------------------------------------------------------------------

    async def _tidy(self) -> None:
        """Refresh the capacity; remove the groups of jobs with nothing left here."""
        while True:
            await asyncio.sleep(self._settings.refresh_seconds)
            try:
                await self._refresh()
                await self._remove_idle_groups()
            except Exception:  # the next round tries again
                log.exception("executor.ray.tidy_failed")

    async def _remove_idle_groups(self) -> None:
        now = time.monotonic()
        busy = {key.job_id for key in self._attempts}
        for job_id, gang in list(self._gangs.items()):
            if job_id in busy or gang.waiting:
                gang.idle_since = None
                continue
            if gang.idle_since is None:
                gang.idle_since = now
            linger = 0.0 if gang.settled else self._settings.group_linger_seconds
            if now - gang.idle_since < linger:
                continue
            if gang.forming is not None:
                continue  # being made: its commands are on their way
            self._gangs.pop(job_id, None)
            if gang.group is not None:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(
                        self._ray_module().util.remove_placement_group, gang.group
                    )
            with contextlib.suppress(OSError):
                await asyncio.to_thread(self._gang_file(job_id).unlink)
            log.info("executor.ray.group_removed", job=job_id)

    def _spawn_task(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def exits(self) -> AsyncIterator[ReplicaExit]:
        """Ended attempts, each once per executor process (until :meth:`reported`)."""
        while True:
            yield await self._exits.get()

    async def close(self) -> None:
        """Stop watching and leave the cluster; the actors and groups stay."""
        tasks = [*self._tasks, *([self._janitor] if self._janitor else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._janitor = None
        if self._ray is not None:
            await asyncio.to_thread(self._ray.shutdown)
            self._ray = None


def create(settings: "ExecutorSettings") -> RayBackend:
    """The Ray backend of ``settings`` (``MLDIAG_EXECUTOR_RAY_*`` for the cluster); it joins
    the cluster on its first call (:meth:`RayBackend.recover` at the executor's start)."""
    import_ray()  # fail at start, with how to fix it, when Ray is not installed
    return RayBackend(
        executor_id=settings.executor_id,
        storage=Storage(settings.storage.url),
        state_dir=settings.state_dir,
        settings=RayBackendSettings(),
        address=settings.address,
        deadline_grace_seconds=settings.stop_grace_seconds,
    )

"""The Kubernetes backend: the executor's side, through the official client (BatchV1Api,
CoreV1Api). Not run against a cluster: see the package's doc."""

import asyncio
import contextlib
import importlib
import json
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from mldiag_executor.backends.base import BackendName, PreparedLaunch, ReplicaExit
from mldiag_executor.backends.kubernetes.manifests import (
    INDEX_ENV,
    LABEL_ATTEMPT,
    LABEL_EXECUTOR,
    LABEL_JOB,
    LABEL_MANAGED,
    SERVICE_ACCOUNT_NAMESPACE,
    Manifest,
    argv_of,
    base_name,
    index_ends,
    job_name,
    pod_hosts,
    render_attempt,
)
from mldiag_executor.backends.kubernetes.settings import KubernetesBackendSettings
from mldiag_platform.errors import MldiagError
from mldiag_schemas.replicas import ExitReason, ReplicaKey, Resources, StartReplica

if TYPE_CHECKING:
    from mldiag_executor.settings import ExecutorSettings

log = structlog.get_logger(__name__)


def _client_module() -> Any:
    """The official client, needed only by this backend (and typed loosely)."""
    return importlib.import_module("kubernetes")


# --- the backend ------------------------------------------------------------------------------


@dataclass
class _Batch:
    commands: list[StartReplica] = field(default_factory=list)
    flush: asyncio.Task[None] | None = None


@dataclass
class _Placed:
    key: ReplicaKey
    job: str
    index: int
    ended: bool = False


class KubernetesBackend:
    """Replicas as pods of Indexed Jobs, through the official client (BatchV1Api,
    CoreV1Api). Not run against a cluster: see the module's doc."""

    name: BackendName = "kubernetes"

    def __init__(
        self,
        *,
        executor_id: str,
        capacity: Resources,
        settings: KubernetesBackendSettings | None = None,
        api_client: Any = None,
        apis: tuple[Any, Any] | None = None,
    ) -> None:
        """``api_client`` (a ``kubernetes.client.ApiClient``) or ``apis`` (a ``BatchV1Api``
        and a ``CoreV1Api``) instead of the in-cluster or kubeconfig configuration."""
        self._executor_id = executor_id
        settings = settings or KubernetesBackendSettings()
        if not settings.namespace:
            settings = settings.model_copy(update={"namespace": own_namespace()})
        self._settings = settings
        self._api_client = api_client
        self._batch_api: Any = apis[0] if apis else None
        self._core_api: Any = apis[1] if apis else None
        self._capacity = capacity
        self._batches: dict[tuple[str, int], _Batch] = {}
        self._placed: dict[ReplicaKey, _Placed] = {}
        self._hosts: dict[str, dict[int, str]] = {}
        """job → port → pod DNS name of the replicas placed so far."""
        self._exits: asyncio.Queue[ReplicaExit] = asyncio.Queue()
        self._watcher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def _apis(self) -> tuple[Any, Any]:
        if self._batch_api is None:
            kubernetes = _client_module()

            client = self._api_client
            if client is None:
                try:
                    kubernetes.config.load_incluster_config()
                except kubernetes.config.ConfigException:
                    kubernetes.config.load_kube_config()
                client = kubernetes.client.ApiClient()
            self._batch_api = kubernetes.client.BatchV1Api(client)
            self._core_api = kubernetes.client.CoreV1Api(client)
        return self._batch_api, self._core_api

    def capacity(self) -> Resources:
        """What the executor's settings say the replicas' Jobs may use (a quota, a node
        pool): the cluster's nodes come and go with autoscaling."""
        return self._capacity

    def address(self) -> str:
        """A placeholder every replica's environment has rewritten to pod DNS names."""
        return self._settings.address

    def running(self) -> list[ReplicaKey]:
        """Attempts collected or placed and not ended."""
        waiting = [c.replica for b in self._batches.values() for c in b.commands]
        return waiting + [k for k, p in self._placed.items() if not p.ended]

    async def start(self, command: StartReplica, launch: PreparedLaunch) -> None:
        """Collect the attempt's commands; create its objects ``collect_seconds`` later."""
        key = command.replica
        argv_of(command, self._settings)  # refuse what cannot run before acking
        if key in self._placed:
            return
        batch = self._batches.setdefault((key.job_id, key.attempt), _Batch())
        if any(c.replica == key for c in batch.commands):
            return
        batch.commands.append(command)
        del launch  # the pod gets the command's own environment (storage URIs, not paths)
        if batch.flush is None:
            batch.flush = self._spawn(self._flush(key.job_id, key.attempt))
        self._ensure_watching()

    async def _flush(self, job_id: str, attempt: int) -> None:
        await asyncio.sleep(self._settings.collect_seconds)
        batch = self._batches.pop((job_id, attempt), _Batch())
        if not batch.commands:
            return
        manifests = render_attempt(
            batch.commands,
            settings=self._settings,
            executor_id=self._executor_id,
            address=self.address(),
            now=datetime.now(UTC),
            known_hosts=self._hosts.get(job_id, {}),
        )
        hosts, indices = pod_hosts(batch.commands)
        try:
            await asyncio.to_thread(self._create, manifests)
        except Exception as exc:  # noqa: BLE001  # every command of the attempt fails alike
            for command in batch.commands:
                self._exits.put_nowait(
                    ReplicaExit(
                        command.replica, "setup_failed", None, str(exc)[-8000:], datetime.now(UTC)
                    )
                )
            return
        self._hosts.setdefault(job_id, {}).update(hosts)
        for command in batch.commands:
            self._placed[command.replica] = _Placed(
                command.replica, job_name(command.replica), indices[command.replica]
            )

    def _create(self, manifests: list[Manifest]) -> None:
        kubernetes = _client_module()

        batch_api, core_api = self._apis()
        namespace = self._settings.namespace
        create = {
            "Secret": core_api.create_namespaced_secret,
            "Service": core_api.create_namespaced_service,
            "Job": batch_api.create_namespaced_job,
        }
        for manifest in manifests:
            try:
                create[manifest["kind"]](namespace, manifest)
            except kubernetes.client.ApiException as exc:
                if exc.status != 409:  # already there: a redelivered start
                    raise

    async def stop(self, replica: ReplicaKey, grace_seconds: float) -> None:
        """Delete the attempt's pool Job (foreground: its pods go first, each with the
        grace) and return once it is gone; its indices end as ``killed``."""
        for batch in self._batches.values():
            for command in list(batch.commands):
                if command.replica == replica:
                    batch.commands.remove(command)
                    self._report(replica, "killed", None, "stopped before it was created")
                    return
        placed = self._placed.get(replica)
        if placed is None or placed.ended:
            return
        kubernetes = _client_module()

        batch_api, _ = self._apis()
        body = kubernetes.client.V1DeleteOptions(
            propagation_policy="Foreground", grace_period_seconds=math.ceil(grace_seconds)
        )
        namespace = self._settings.namespace
        with contextlib.suppress(kubernetes.client.ApiException):
            await asyncio.to_thread(
                batch_api.delete_namespaced_job, placed.job, namespace, body=body
            )
        until = time.monotonic() + grace_seconds + 60
        while time.monotonic() < until:
            try:
                await asyncio.to_thread(batch_api.read_namespaced_job, placed.job, namespace)
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:  # gone, pods first (foreground)
                    break
            await asyncio.sleep(self._settings.poll_seconds)
        for other in self._placed.values():
            if other.job == placed.job and not other.ended:
                other.ended = True
                self._report(other.key, "killed", None, "stopped (its Job was deleted)")

    async def recover(self) -> list[ReplicaKey]:
        """Re-adopt the indices of this executor's Jobs (listed by label)."""
        batch_api, _ = self._apis()
        selector = f"{LABEL_MANAGED}=mldiag,{LABEL_EXECUTOR}={self._executor_id}"
        jobs = await asyncio.to_thread(
            batch_api.list_namespaced_job, self._settings.namespace, label_selector=selector
        )
        adopted: list[ReplicaKey] = []
        for job in jobs.items:
            env = {e.name: e.value for e in job.spec.template.spec.containers[0].env or []}
            per_index = json.loads(env.get(INDEX_ENV) or "{}")
            labels = job.metadata.labels or {}
            for index in range(job.spec.completions or 0):
                replica = {**env, **per_index.get(str(index), {})}.get("MLDIAG_REPLICA", "")
                pool, _, number = replica.removeprefix("workerpool").partition("-")
                try:
                    key = ReplicaKey(
                        job_id=labels[LABEL_JOB],
                        pool=int(pool),
                        index=int(number),
                        attempt=int(labels[LABEL_ATTEMPT]),
                    )
                except (KeyError, ValueError):
                    continue
                if key not in self._placed:
                    self._placed[key] = _Placed(key, job.metadata.name, index)
                    adopted.append(key)
        self._ensure_watching()
        return adopted

    def _ensure_watching(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch(), name="k8s-backend-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._settings.poll_seconds)
            try:
                await asyncio.to_thread(self._poll)
            except Exception:  # the next round tries again
                log.exception("executor.k8s.poll_failed")

    def _poll(self) -> None:
        batch_api, core_api = self._apis()
        namespace = self._settings.namespace
        for name in sorted({p.job for p in self._placed.values() if not p.ended}):
            job = batch_api.read_namespaced_job_status(name, namespace)
            pods = core_api.list_namespaced_pod(namespace, label_selector=f"job-name={name}")
            for end in index_ends(job, pods.items):
                for placed in self._placed.values():
                    if placed.job == name and placed.index == end.index and not placed.ended:
                        placed.ended = True
                        self._report(placed.key, end.reason, end.exit_code, end.message)

    def _report(self, key: ReplicaKey, reason: ExitReason, code: int | None, message: str) -> None:
        self._exits.put_nowait(ReplicaExit(key, reason, code, message[-8000:], datetime.now(UTC)))

    async def exits(self) -> AsyncIterator[ReplicaExit]:
        """Ended indices, each once per executor process."""
        while True:
            yield await self._exits.get()

    async def reported(self, replica: ReplicaKey) -> None:
        """Forget the attempt (its Job goes with ``ttlSecondsAfterFinished``); the last
        of an attempt takes its Service and Secret along."""
        self._placed.pop(replica, None)
        if any((k.job_id, k.attempt) == (replica.job_id, replica.attempt) for k in self._placed):
            return
        kubernetes = _client_module()
        _, core_api = self._apis()
        base = base_name(replica)
        namespace = self._settings.namespace
        for delete, name in (
            (core_api.delete_namespaced_service, base),
            (core_api.delete_namespaced_secret, f"{base}-token"),
        ):
            with contextlib.suppress(kubernetes.client.ApiException):
                await asyncio.to_thread(delete, name, namespace)

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Stop watching; the Jobs keep running."""
        tasks = [*self._tasks, *([self._watcher] if self._watcher else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._watcher = None


def own_namespace() -> str:
    """The executor pod's namespace (its service account's), else ``default``."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


def create(settings: "ExecutorSettings") -> KubernetesBackend:
    """The Kubernetes backend of ``settings`` (``MLDIAG_EXECUTOR_K8S_*`` for the rest):
    announces ``MLDIAG_EXECUTOR_CPUS`` / ``MEMORY_BYTES`` (required: a cluster has no
    fixed size)."""
    if not settings.cpus or not settings.memory_bytes:
        raise MldiagError(
            "the kubernetes backend announces what its Jobs may use: set "
            "MLDIAG_EXECUTOR_CPUS and MLDIAG_EXECUTOR_MEMORY_BYTES"
        )
    backend_settings = KubernetesBackendSettings()
    if settings.address:
        backend_settings = backend_settings.model_copy(update={"address": settings.address})
    capacity = Resources(
        cpus=settings.cpus,
        memory_bytes=settings.memory_bytes,
        accelerator_type=backend_settings.accelerator_type,
        accelerator_count=backend_settings.accelerator_count,
    )
    return KubernetesBackend(
        executor_id=settings.executor_id, capacity=capacity, settings=backend_settings
    )

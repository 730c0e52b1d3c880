"""The Kubernetes backend: one Indexed Job per pool of a job attempt, a headless Service for
stable replica names, and a Secret for the run token. **It has not run against a cluster**:
the manifests are rendered and validated (golden files, the official client's models,
kubernetes-validate); the client calls follow the API's documented behaviour.

Rendering (:func:`render_attempt`, pure) takes the ``StartReplica`` commands of one job
attempt (the scheduler sends them together; the backend collects them for
``collect_seconds``) and makes:

- ``Secret <base>-token``: ``MLDIAG_TOKEN``, so the token is not in the Job's spec.
- ``Service <base>`` (headless, ``publishNotReadyAddresses``): the pods' subdomain.
- ``Job <base>-wp<pool>`` per pool: ``completionMode: Indexed``, ``completions =
  parallelism`` = the pool's replicas here, ``restartPolicy: Never``,
  ``backoffLimitPerIndex`` (default 0: the scheduler owns restarts), ``podFailurePolicy``
  (``Ignore`` on ``DisruptionTarget``: a preempted or evicted pod is replaced without
  counting; ``FailIndex`` on the permanent exit codes 126 and 127), ``podReplacementPolicy:
  Failed`` (never two pods of one index), ``activeDeadlineSeconds`` from the deadline,
  requests and limits from the machine spec (``nvidia.com/gpu``, ``google.com/tpu``), a
  ``nodeSelector`` from the accelerator type (GKE's labels).

``<base>`` is ``mldiag-<job>-a<attempt>``; an Indexed Job's pod ``k`` is named
``<base>-wp<pool>-<k>`` with the Service as subdomain, so its DNS name is
``<base>-wp<pool>-<k>.<base>``. The scheduler wrote ``<executor address>:<port>`` into the
environment; :func:`~mldiag_executor.backends.addresses.rewrite_addresses` turns each into
the DNS name of the pod that replica runs in. The Job's template is shared by its indices:
what differs between replicas (``CLUSTER_SPEC``'s task, ``RANK``, ``MLDIAG_REPLICA`` …) goes
into ``MLDIAG_INDEX_ENV`` (JSON: completion index → variables), and a few lines of Python
in front of the launcher apply the entry of ``$JOB_COMPLETION_INDEX`` and exec
``mldiag run --replica <name> -- <command>``. The image needs ``python`` and the mldiag
SDK (the launcher).
"""

import asyncio
import contextlib
import hashlib
import importlib
import json
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mldiag_executor.backends.addresses import rewrite_addresses
from mldiag_executor.backends.base import BackendName, PreparedLaunch, ReplicaExit
from mldiag_executor.errors import Rejected
from mldiag_platform.errors import MldiagError
from mldiag_schemas.replicas import ExitReason, ReplicaKey, Resources, StartReplica

if TYPE_CHECKING:
    from mldiag_executor.settings import ExecutorSettings

log = structlog.get_logger(__name__)

Manifest = dict[str, Any]

CONTAINER = "replica"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_EXECUTOR = "mldiag.io/executor"
LABEL_JOB = "mldiag.io/job"
LABEL_ATTEMPT = "mldiag.io/attempt"
LABEL_POOL = "mldiag.io/pool"
LABEL_REPLICA = "mldiag.io/training-replica"
"""On every replica pod: the NetworkPolicy ``training-replicas`` lets them reach each other."""
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
TOKEN_VARIABLE = "MLDIAG_TOKEN"  # noqa: S105  # a variable's name, not a secret
INDEX_ENV = "MLDIAG_INDEX_ENV"

# Applies the completion index's variables, then execs the launcher (argv after -c).
ENTRYPOINT = (
    "import json,os,sys\n"
    "index=os.environ.get('JOB_COMPLETION_INDEX','0')\n"
    f"os.environ.update(json.loads(os.environ.pop('{INDEX_ENV}','{{}}')).get(index,{{}}))\n"
    "argv=[a.replace('{replica}',os.environ.get('MLDIAG_REPLICA','')) for a in sys.argv[1:]]\n"
    "os.execvp(argv[0],argv)\n"
)

# Vertex accelerator → (node label, value, extended resource). GKE's labels; other
# clusters set the label name (``accelerator_label``) and keep the values, or label nodes so.
_TPU_VALUES = {
    "TPU_V2": "tpu-v2-slice",
    "TPU_V3": "tpu-v3-slice",
    "TPU_V4_POD": "tpu-v4-podslice",
    "TPU_V5_LITEPOD": "tpu-v5-lite-podslice",
}


class KubernetesBackendSettings(BaseSettings):
    """How the executor uses a Kubernetes cluster (env ``MLDIAG_EXECUTOR_K8S_*``)."""

    model_config = SettingsConfigDict(env_prefix="MLDIAG_EXECUTOR_K8S_", frozen=True)

    namespace: str = Field(
        default="",
        description="Where Jobs are created (default: the executor pod's own namespace, "
        "else ``default``).",
    )
    service_account: str = Field(default="", description="The pods' service account.")
    launcher: list[str] = Field(
        default_factory=lambda: ["mldiag", "run", "--replica", "{replica}"],
        description="The launcher in the image, before ``-- <command>``; ``{replica}`` "
        "becomes the replica's name.",
    )
    python: str = Field(default="python", description="The image's interpreter.")
    backoff_limit_per_index: int = Field(
        default=0,
        ge=0,
        description="Kubernetes' own retries per index (invisible to the scheduler, which "
        "restarts failed replicas itself); preemptions never count.",
    )
    permanent_exit_codes: list[int] = Field(
        default_factory=lambda: [126, 127], description="Exit codes that fail the index."
    )
    accelerator_label: str = Field(
        default="cloud.google.com/gke-accelerator",
        description="The node label that names a node's GPU type.",
    )
    tpu_label: str = Field(
        default="cloud.google.com/gke-tpu-accelerator",
        description="The node label that names a node's TPU type.",
    )
    accelerator_type: str = Field(
        default="", description="The accelerator type announced (Vertex's name)."
    )
    accelerator_count: int = Field(default=0, ge=0, description="How many are announced.")
    ttl_seconds_after_finished: int = Field(
        default=3600, ge=0, description="How long a finished Job is kept."
    )
    collect_seconds: float = Field(
        default=1.0, gt=0, description="How long an attempt's commands are collected."
    )
    poll_seconds: float = Field(default=2.0, gt=0, description="Seconds between Job reads.")
    address: str = Field(
        default="replicas.mldiag.invalid",
        description="The placeholder address the executor announces (rewritten per pod).",
    )


# --- names ------------------------------------------------------------------------------------


def base_name(key: ReplicaKey) -> str:
    """``mldiag-<job>-a<attempt>`` (hashed when a pod's DNS label would pass 63)."""
    name = f"mldiag-{key.job_id}-a{key.attempt}"
    # The longest pod hostname is <base>-wp3-<index up to 5 digits>.
    if len(name) + 10 > 63:
        digest = hashlib.sha256(name.encode()).hexdigest()[:10]
        name = f"mldiag-{digest}-a{key.attempt}"
    return name


def job_name(key: ReplicaKey) -> str:
    """The Indexed Job of the attempt's pool."""
    return f"{base_name(key)}-wp{key.pool}"


def quantity_cpu(cpus: float) -> str:
    """CPUs as a Kubernetes quantity (``4``, ``500m``)."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def quantity_memory(memory_bytes: int) -> str:
    """Bytes as a Kubernetes quantity (``15Gi``, ``512Mi``, or bytes)."""
    for unit, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if memory_bytes and memory_bytes % size == 0:
            return f"{memory_bytes // size}{unit}"
    return str(memory_bytes)


def node_selector(resources: Resources, settings: KubernetesBackendSettings) -> dict[str, str]:
    """The node label a replica's accelerator needs (GKE's names, e.g.
    ``NVIDIA_TESLA_T4`` → ``nvidia-tesla-t4``)."""
    accelerator = resources.accelerator_type
    if not accelerator or not resources.accelerator_count:
        return {}
    if accelerator in _TPU_VALUES:
        return {settings.tpu_label: _TPU_VALUES[accelerator]}
    return {settings.accelerator_label: accelerator.lower().replace("_", "-")}


def container_resources(resources: Resources) -> dict[str, dict[str, str]]:
    """Requests (CPU, memory, accelerators) and limits (memory, accelerators: extended
    resources must have equal requests and limits; no CPU limit, which only throttles)."""
    requests = {"cpu": quantity_cpu(max(resources.cpus, 0.001))}
    limits: dict[str, str] = {}
    if resources.memory_bytes:
        requests["memory"] = limits["memory"] = quantity_memory(resources.memory_bytes)
    if resources.accelerator_count:
        name = "google.com/tpu" if resources.accelerator_type in _TPU_VALUES else "nvidia.com/gpu"
        requests[name] = limits[name] = str(resources.accelerator_count)
    return {"requests": requests, "limits": limits} if limits else {"requests": requests}


# --- rendering --------------------------------------------------------------------------------


def _argv(command: StartReplica, settings: KubernetesBackendSettings) -> list[str]:
    spec = command.launch
    if spec.package_uris:
        raise Rejected(
            "the Kubernetes executor runs images as they are: put the package in the image "
            "(packageUris are installed by process executors only)"
        )
    if spec.python_module:
        return [settings.python, "-m", spec.python_module, *spec.args]
    if not spec.command:
        raise Rejected("nothing to run: neither a command nor a python module")
    return list(spec.command)


def _labels(key: ReplicaKey, executor_id: str) -> dict[str, str]:
    return {
        LABEL_MANAGED: "mldiag",
        LABEL_EXECUTOR: executor_id,
        LABEL_JOB: key.job_id,
        LABEL_ATTEMPT: str(key.attempt),
    }


def pod_hosts(
    commands: Sequence[StartReplica],
) -> tuple[dict[int, str], dict[ReplicaKey, int]]:
    """Each command's port → its pod's DNS name, and its completion index in its Job."""
    hosts: dict[int, str] = {}
    indices: dict[ReplicaKey, int] = {}
    by_pool: dict[int, list[StartReplica]] = {}
    for command in commands:
        by_pool.setdefault(command.replica.pool, []).append(command)
    for pool_commands in by_pool.values():
        for position, command in enumerate(sorted(pool_commands, key=lambda c: c.replica.index)):
            key = command.replica
            indices[key] = position
            hosts[command.launch.port] = f"{job_name(key)}-{position}.{base_name(key)}"
    return hosts, indices


def render_attempt(
    commands: Sequence[StartReplica],
    *,
    settings: KubernetesBackendSettings,
    executor_id: str,
    address: str,
    now: datetime,
    known_hosts: Mapping[int, str] | None = None,
) -> list[Manifest]:
    """The Secret, the Service and one Indexed Job per pool for one job attempt's commands
    (all of one job and one attempt number), in the order they are to be created.

    ``known_hosts`` (port → DNS name) names replicas at this executor that run in other
    attempts' pods (a replica restarted alone)."""
    if not commands:
        return []
    first = commands[0].replica
    if any(
        (c.replica.job_id, c.replica.attempt) != (first.job_id, first.attempt) for c in commands
    ):
        raise ValueError("one job attempt at a time")
    namespace = settings.namespace or "default"
    base = base_name(first)
    labels = _labels(first, executor_id)
    hosts, indices = pod_hosts(commands)
    every_host = {**(known_hosts or {}), **hosts}
    token = commands[0].run_token.get_secret_value()
    manifests: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{base}-token", "namespace": namespace, "labels": {**labels}},
            "type": "Opaque",
            "stringData": {TOKEN_VARIABLE: token},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": base, "namespace": namespace, "labels": {**labels}},
            "spec": {
                "clusterIP": "None",
                # Replicas find each other before they are Ready (rendezvous comes first).
                "publishNotReadyAddresses": True,
                "selector": {**labels},
                "ports": [
                    {"name": f"p{port}", "port": port, "targetPort": port, "protocol": "TCP"}
                    for port in sorted({c.launch.port for c in commands})
                ],
            },
        },
    ]
    by_pool: dict[int, list[StartReplica]] = {}
    for command in sorted(commands, key=lambda c: (c.replica.pool, c.replica.index)):
        by_pool.setdefault(command.replica.pool, []).append(command)
    for pool, pool_commands in by_pool.items():
        job = _render_job(
            pool, pool_commands, settings, labels, base, (address, every_host), indices, now
        )
        job["metadata"]["namespace"] = namespace
        manifests.append(job)
    return manifests


def _render_job(
    pool: int,
    commands: list[StartReplica],
    settings: KubernetesBackendSettings,
    labels: dict[str, str],
    base: str,
    addresses: tuple[str, Mapping[int, str]],
    indices: Mapping[ReplicaKey, int],
    now: datetime,
) -> Manifest:
    first = commands[0]
    spec = first.launch
    argv = _argv(first, settings)
    if any(_argv(c, settings) != argv or c.launch.image_uri != spec.image_uri for c in commands):
        raise ValueError(f"workerpool{pool}: replicas of one pool run one image and command")
    envs: dict[int, dict[str, str]] = {}
    for command in commands:
        env = {k: v for k, v in command.launch.env.items() if k != TOKEN_VARIABLE}
        env = rewrite_addresses(env, *addresses)
        env["MLDIAG_REPLICA"] = command.replica.replica_name
        env["MLDIAG_HOST"] = command.replica.replica_name
        env["MLDIAG_ATTEMPT"] = str(command.replica.attempt)
        envs[indices[command.replica]] = env
    names = set().union(*(set(env) for env in envs.values()))
    shared = {
        name: envs[0][name]
        for name in sorted(names)
        if all(env.get(name) == envs[0].get(name) for env in envs.values()) and name in envs[0]
    }
    per_index = {
        str(index): {name: value for name, value in sorted(env.items()) if name not in shared}
        for index, env in sorted(envs.items())
    }
    container_env: list[dict[str, Any]] = [
        {"name": name, "value": value} for name, value in shared.items()
    ]
    container_env.append({"name": INDEX_ENV, "value": json.dumps(per_index, sort_keys=True)})
    container_env.append(
        {
            "name": TOKEN_VARIABLE,
            "valueFrom": {"secretKeyRef": {"name": f"{base}-token", "key": TOKEN_VARIABLE}},
        }
    )
    pool_labels = {**labels, LABEL_POOL: str(pool)}
    seconds = max(1, math.ceil((first.deadline - now).total_seconds()))
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "subdomain": base,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": CONTAINER,
                "image": spec.image_uri,
                "command": [settings.python, "-c", ENTRYPOINT],
                "args": [*settings.launcher, "--", *argv],
                "env": container_env,
                "resources": container_resources(spec.resources),
            }
        ],
    }
    if selector := node_selector(spec.resources, settings):
        pod_spec["nodeSelector"] = selector
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    count = len(commands)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{base}-wp{pool}", "labels": pool_labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "backoffLimitPerIndex": settings.backoff_limit_per_index,
            "podReplacementPolicy": "Failed",
            "activeDeadlineSeconds": seconds,
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                    {
                        "action": "FailIndex",
                        "onExitCodes": {
                            "containerName": CONTAINER,
                            "operator": "In",
                            "values": sorted(settings.permanent_exit_codes),
                        },
                    },
                ]
            },
            "template": {
                "metadata": {"labels": {**pool_labels, LABEL_REPLICA: "true"}},
                "spec": pod_spec,
            },
        },
    }


# --- reading Jobs back ------------------------------------------------------------------------


def parse_indexes(text: str | None) -> set[int]:
    """``"0,2-4"`` (a Job's ``completedIndexes`` / ``failedIndexes``) → ``{0, 2, 3, 4}``."""
    found: set[int] = set()
    for part in (text or "").split(","):
        if not part.strip():
            continue
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


@dataclass(frozen=True, slots=True)
class IndexEnd:
    """How one completion index of a Job ended."""

    index: int
    reason: ExitReason
    exit_code: int | None
    message: str


def index_ends(job: Any, pods: Iterable[Any]) -> list[IndexEnd]:
    """The ended indices of a Job (a ``V1Job``) from its status and its pods' container
    states: completed → exit 0; failed → the last pod's exit code; the Job failed as a whole
    (deadline) → ``killed`` for the indices still open."""
    status = job.status
    completed = parse_indexes(status.completed_indexes if status else None)
    failed = parse_indexes(status.failed_indexes if status else None)
    codes: dict[int, tuple[int | None, str]] = {}
    for pod in sorted(
        pods, key=lambda p: p.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC)
    ):
        annotations = pod.metadata.annotations or {}
        try:
            index = int(annotations.get(INDEX_ANNOTATION, ""))
        except ValueError:
            continue
        for state in (pod.status.container_statuses or []) if pod.status else []:
            terminated = state.state.terminated if state.state else None
            if state.name == CONTAINER and terminated is not None:
                codes[index] = (terminated.exit_code, terminated.message or terminated.reason or "")
    ends = [IndexEnd(i, "exited", 0, "") for i in sorted(completed)]
    ends += [IndexEnd(i, "exited", *codes.get(i, (None, "the pod failed"))) for i in sorted(failed)]
    conditions = (status.conditions or []) if status else []
    failed_job = next((c for c in conditions if c.type == "Failed" and c.status == "True"), None)
    if failed_job is not None:
        completions = job.spec.completions or 0
        for index in range(completions):
            if index not in completed and index not in failed:
                reason = failed_job.reason or "Failed"
                ends.append(IndexEnd(index, "killed", None, f"the Job failed: {reason}"))
    return ends


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
        _argv(command, self._settings)  # refuse what cannot run before acking
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

"""What one job attempt becomes in Kubernetes (pure functions: rendering), and how its
Jobs' status reads back as replica exits. See the package's doc for the design."""

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mldiag_executor.backends.addresses import rewrite_addresses
from mldiag_executor.backends.kubernetes.settings import KubernetesBackendSettings
from mldiag_executor.errors import Rejected
from mldiag_schemas.replicas import ExitReason, ReplicaKey, Resources, StartReplica

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


def argv_of(command: StartReplica, settings: KubernetesBackendSettings) -> list[str]:
    """The replica's program in its image; :class:`Rejected` for what an image cannot run
    as it is (packages to install)."""
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
    argv = argv_of(first, settings)
    if any(argv_of(c, settings) != argv or c.launch.image_uri != spec.image_uri for c in commands):
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

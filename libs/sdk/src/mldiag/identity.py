"""Who is recording: the run id derived from the workload, the process index, the host.

The run id is a UUIDv5 of the workload's identity, so every host of a job and every restart
of it (a Slurm requeue, a Kubernetes Job retry) attaches to the same run.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Mapping
from pathlib import Path

RUN_ID_NAMESPACE = uuid.UUID("6f1d3c2e-8a57-4c0b-9d2e-3b7f5a9e1c44")
"""Namespace of derived run ids; changing it would split every workload's runs."""

_RUN_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")  # = mldiag_schemas.ids
_K8S_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# Most specific first; LOCAL_RANK last because it is 0 on every host.
_PROCESS_INDEX_VARS = (
    "MLDIAG_PROCESS_INDEX",
    "JAX_PROCESS_ID",
    "RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "LOCAL_RANK",
)


def is_run_id(value: str) -> bool:
    """Whether ``value`` is a valid run id (lower-case letters, digits, '-'; at most 63)."""
    return _RUN_ID_RE.match(value) is not None


def workload_identity(
    workload_id: str | None = None, env: Mapping[str, str] | None = None
) -> str | None:
    """A stable name of the workload this process belongs to, or None when unknown.

    In order: ``workload_id``, ``MLDIAG_WORKLOAD_ID`` (or the official SDK's
    ``RUN_WORKLOAD_ID``), a Slurm job (``SLURM_JOB_ID`` on ``SLURM_CLUSTER_NAME``; an array
    task is its own workload), a Kubernetes workload (``JOBSET_NAME``, ``JOB_NAME`` or
    ``MLDIAG_K8S_WORKLOAD``, set through the downward API, in ``POD_NAMESPACE``).
    """
    env = os.environ if env is None else env
    explicit = workload_id or env.get("MLDIAG_WORKLOAD_ID") or env.get("RUN_WORKLOAD_ID")
    if explicit:
        return f"custom/{explicit}"
    if job := env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID"):
        cluster = env.get("SLURM_CLUSTER_NAME", "")
        task = env.get("SLURM_ARRAY_TASK_ID")
        return f"slurm/{cluster}/{job}" + (f"_{task}" if env.get("SLURM_ARRAY_JOB_ID") else "")
    if env.get("KUBERNETES_SERVICE_HOST"):
        name = env.get("MLDIAG_K8S_WORKLOAD") or env.get("JOBSET_NAME") or env.get("JOB_NAME")
        if name:
            return f"k8s/{env.get('POD_NAMESPACE') or _k8s_namespace()}/{name}"
    return None


def resolve_run_id(
    run_id: str | None = None,
    workload_id: str | None = None,
    env: Mapping[str, str] | None = None,
) -> str:
    """The run id: ``run_id``, ``MLDIAG_RUN_ID``, derived from the workload, else random."""
    env = os.environ if env is None else env
    chosen = run_id or env.get("MLDIAG_RUN_ID")
    if chosen:
        if not is_run_id(chosen):
            raise ValueError(
                f"invalid run id {chosen!r}: use lower-case letters, digits and '-' (max 63)"
            )
        return chosen
    identity = workload_identity(workload_id, env)
    if identity is None:
        return str(uuid.uuid4())
    return str(uuid.uuid5(RUN_ID_NAMESPACE, identity))


def process_index(explicit: int | None = None, env: Mapping[str, str] | None = None) -> int:
    """This process's index in the job (0 when alone); only process 0 changes the run."""
    if explicit is not None:
        return explicit
    env = os.environ if env is None else env
    for name in _PROCESS_INDEX_VARS:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def host_name(env: Mapping[str, str] | None = None) -> str:
    """``MLDIAG_HOST`` (a launcher's name for this host, e.g. a pod's), else this machine's
    host name; at most 253 characters, the contract's limit."""
    env = os.environ if env is None else env
    return (env.get("MLDIAG_HOST") or socket.gethostname())[:253]


def _k8s_namespace() -> str:
    try:
        return _K8S_NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"

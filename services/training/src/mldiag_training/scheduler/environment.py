"""A replica's environment, as pure functions: what Vertex gives training code, and what
mldiag's SDK needs to attach to the job's run.

- ``CLUSTER_SPEC``: ``{"cluster": {"workerpool0": ["host:port"], ...}, "environment":
  "cloud", "task": {"type": "workerpool1", "index": 0}, "job": <the CustomJobSpec>}``. The
  job is the spec as a dict with proto field names (snake_case, int64 as strings, enums by
  name), as Google's services write protos into TF_CONFIG. A tuning job's trial (its pool's
  env has ``CLOUD_ML_TRIAL_ID``) adds ``"trial": "<id>"`` to the task, as Vertex does.
- ``TF_CONFIG``: the same cluster under TensorFlow's names (``chief``, ``worker``, ``ps``);
  the evaluator is not in the cluster but is a task type.
- ``MASTER_ADDR``/``MASTER_PORT`` (the chief), ``WORLD_SIZE`` (pools 0-2), ``RANK`` (chief 0,
  then pools in order), ``LOCAL_RANK=0``; ``JAX_COORDINATOR_ADDRESS`` (the chief's
  ``host:port``), ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (the same numbers). Evaluators
  are outside the world: they get neither ``RANK`` nor ``JAX_PROCESS_ID``.
- ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR``, ``AIP_TENSORBOARD_LOG_DIR``: ``<base>/model/``,
  ``<base>/checkpoints/``, ``<base>/logs/`` (URIs; the executor maps them to directories),
  the base being ``baseOutputDirectory.outputUriPrefix`` or ``<storage>/jobs/<job>/output``.
- ``CLOUD_ML_PROJECT_ID``, ``CLOUD_ML_REGION``, ``CLOUD_ML_JOB_ID``; ``AIP_EXPERIMENT_NAME``
  and ``AIP_EXPERIMENT_RUN_NAME`` when the spec names an experiment.
- mldiag's own: ``MLDIAG_API_URL``, ``MLDIAG_TOKEN``, ``MLDIAG_RUN_ID`` (the job id),
  ``MLDIAG_PROJECT``, ``MLDIAG_LOCATION``, ``MLDIAG_CREATE_RUN=0``, ``MLDIAG_REPLICA``,
  ``MLDIAG_ATTEMPT``.

The pool's own ``env`` comes first and is expanded as Vertex (and Kubernetes) do:
``$(NAME)`` is replaced by a variable defined earlier in the list or by the platform, an
unknown reference is left as written, and ``$$(NAME)`` is the literal ``$(NAME)``. Every
name the platform sets wins over the spec's (a job cannot choose its own ``MLDIAG_TOKEN``
or claim another ``RANK``).
"""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mldiag_schemas.jobs import POOL_ROLES, CustomJobSpec, EnvVar

_REFERENCE = re.compile(r"\$\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")

CLUSTER_POOLS = 3
"""Pools 0-2 (chief, workers, parameter servers) form the world; evaluators are outside."""

TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"
"""Set in every pool's env of a tuning job's trial (by the tuning controller)."""


@dataclass(frozen=True)
class ReplicaPlace:
    """Who a replica is and where the whole job runs."""

    job_id: str
    project: str
    location: str
    pool: int
    index: int
    attempt: int
    cluster: Mapping[int, Sequence[str]]
    """Every non-empty pool's replicas' ``host:port``, by pool, in index order."""


@dataclass(frozen=True)
class PlatformPlace:
    """What the platform hands every replica."""

    api_url: str
    token: str
    storage_url: str


def output_base(spec: CustomJobSpec, storage_url: str, job_id: str) -> str:
    """The job's base output URI, without a trailing slash."""
    if spec.base_output_directory is not None:
        return spec.base_output_directory.output_uri_prefix.rstrip("/")
    return f"{storage_url.rstrip('/')}/jobs/{job_id}/output"


def logs_uri(storage_url: str, job_id: str, pool: int, index: int, attempt: int) -> str:
    """Where one attempt's stdout and stderr go."""
    return (
        f"{storage_url.rstrip('/')}/jobs/{job_id}/logs/workerpool{pool}-{index}/attempt-{attempt}"
    )


def world(cluster: Mapping[int, Sequence[str]]) -> tuple[int, dict[tuple[int, int], int]]:
    """``WORLD_SIZE`` and every world member's ``RANK`` by (pool, index)."""
    ranks: dict[tuple[int, int], int] = {}
    for pool in range(CLUSTER_POOLS):
        for index in range(len(cluster.get(pool, ()))):
            ranks[(pool, index)] = len(ranks)
    return len(ranks), ranks


def cluster_spec(spec: CustomJobSpec, place: ReplicaPlace) -> dict[str, Any]:
    """Vertex's ``CLUSTER_SPEC``."""
    return {
        "cluster": {
            f"workerpool{pool}": list(addresses)
            for pool, addresses in sorted(place.cluster.items())
            if addresses
        },
        "environment": "cloud",
        "task": _task(f"workerpool{place.pool}", spec, place),
        "job": job_dict(spec),
    }


def tf_config(spec: CustomJobSpec, place: ReplicaPlace) -> dict[str, Any]:
    """TensorFlow's ``TF_CONFIG`` (chief, worker, ps; the evaluator is not in the cluster)."""
    return {
        "cluster": {
            POOL_ROLES[pool]: list(addresses)
            for pool, addresses in sorted(place.cluster.items())
            if addresses and pool < CLUSTER_POOLS
        },
        "task": _task(POOL_ROLES[place.pool], spec, place),
        "job": job_dict(spec),
        "environment": "cloud",
    }


def _task(kind: str, spec: CustomJobSpec, place: ReplicaPlace) -> dict[str, Any]:
    """The ``task`` of CLUSTER_SPEC and TF_CONFIG; a trial's id when the pool's env has one
    (Vertex's own trials carry it there, and code written for Vertex reads it)."""
    task: dict[str, Any] = {"type": kind, "index": place.index}
    pool = spec.worker_pool_specs[place.pool]
    code = pool.container_spec or pool.python_package_spec
    trial = next(
        (v.value for v in (code.env if code is not None else []) if v.name == TRIAL_ID_ENV), None
    )
    if trial is not None:
        task["trial"] = trial
    return task


def job_dict(spec: CustomJobSpec) -> dict[str, Any]:
    """The spec as proto field names give it (snake_case; int64 strings; enum names)."""
    dumped: dict[str, Any] = spec.model_dump(mode="json", by_alias=False, exclude_none=True)
    return dumped


def platform_env(
    spec: CustomJobSpec, place: ReplicaPlace, platform: PlatformPlace
) -> dict[str, str]:
    """Every variable the platform sets for one replica attempt."""
    size, ranks = world(place.cluster)
    chief = place.cluster[0][0]
    chief_host, _, chief_port = chief.rpartition(":")
    base = output_base(spec, platform.storage_url, place.job_id)
    env = {
        "CLUSTER_SPEC": json.dumps(cluster_spec(spec, place), separators=(",", ":")),
        "TF_CONFIG": json.dumps(tf_config(spec, place), separators=(",", ":")),
        "MASTER_ADDR": chief_host,
        "MASTER_PORT": chief_port,
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": "0",
        "JAX_COORDINATOR_ADDRESS": chief,
        "JAX_NUM_PROCESSES": str(size),
        "AIP_MODEL_DIR": f"{base}/model/",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
        "CLOUD_ML_PROJECT_ID": place.project,
        "CLOUD_ML_REGION": place.location,
        "CLOUD_ML_JOB_ID": place.job_id,
        "MLDIAG_API_URL": platform.api_url,
        "MLDIAG_TOKEN": platform.token,
        "MLDIAG_RUN_ID": place.job_id,
        "MLDIAG_PROJECT": place.project,
        "MLDIAG_LOCATION": place.location,
        "MLDIAG_CREATE_RUN": "0",
        "MLDIAG_REPLICA": f"workerpool{place.pool}-{place.index}",
        "MLDIAG_ATTEMPT": str(place.attempt),
    }
    rank = ranks.get((place.pool, place.index))
    if rank is not None:
        env["RANK"] = str(rank)
        env["JAX_PROCESS_ID"] = str(rank)
    if spec.experiment:
        env["AIP_EXPERIMENT_NAME"] = spec.experiment
        if spec.experiment_run:
            env["AIP_EXPERIMENT_RUN_NAME"] = spec.experiment_run
    return env


def expand(value: str, known: Mapping[str, str]) -> str:
    """Vertex's ``$(NAME)`` expansion of one value; ``$$(NAME)`` stays ``$(NAME)``."""

    def replace(match: re.Match[str]) -> str:
        escaped, name = match.group(1), match.group(2)
        if escaped is not None:
            return f"$({escaped})"
        return known.get(name, match.group(0))

    return _REFERENCE.sub(replace, value)


def user_env(variables: Sequence[EnvVar], platform: Mapping[str, str]) -> dict[str, str]:
    """The spec's variables, expanded in order against the platform's and earlier ones."""
    known = dict(platform)
    result: dict[str, str] = {}
    for variable in variables:
        value = expand(variable.value, known)
        result[variable.name] = value
        if variable.name not in platform:
            known[variable.name] = value
    return result


def replica_env(
    spec: CustomJobSpec, place: ReplicaPlace, platform: PlatformPlace
) -> dict[str, str]:
    """A replica attempt's whole environment: the pool's env, then the platform's on top."""
    pool = spec.worker_pool_specs[place.pool]
    task = pool.container_spec or pool.python_package_spec
    own = platform_env(spec, place, platform)
    variables = task.env if task is not None else []
    return {**user_env(variables, own), **own}

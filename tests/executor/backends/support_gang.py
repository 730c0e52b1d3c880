"""The commands of a whole multi-replica job, with the environment the scheduler writes
(``CLUSTER_SPEC``, ``TF_CONFIG``, ``MASTER_*``, ``RANK``, ``JAX_*``, ``MLDIAG_*``), every
replica at ``<executor address>:<its port>``: what the Ray and Kubernetes backends rewrite."""

import json
from collections.abc import Sequence
from datetime import datetime

from mldiag_schemas.replicas import ReplicaKey, ReplicaLaunch, Resources, StartReplica

TF_NAMES = {0: "chief", 1: "worker", 2: "ps", 3: "evaluator"}


def gang_commands(
    *,
    executor_id: str,
    address: str,
    pools: Sequence[tuple[int, Resources]],
    deadline: datetime,
    logs_root: str,
    command: Sequence[str] = ("python", "train.py"),
    image_uri: str = "us-docker.pkg.dev/project/repo/trainer:1",
    job_id: str = "4242",
    attempt: int = 0,
    first_port: int = 20000,
) -> list[StartReplica]:
    """One ``StartReplica`` per replica of pools ``[(replica count, resources), …]``."""
    cluster: dict[int, list[str]] = {}
    port = first_port
    for pool, (count, _) in enumerate(pools):
        for _ in range(count):
            cluster.setdefault(pool, []).append(f"{address}:{port}")
            port += 1
    world = [(p, i) for p in sorted(cluster) if p < 3 for i in range(len(cluster[p]))]
    chief = cluster[0][0]
    commands = []
    for pool, (count, resources) in enumerate(pools):
        for index in range(count):
            key = ReplicaKey(job_id=job_id, pool=pool, index=index, attempt=attempt)
            task = {"type": f"workerpool{pool}", "index": index}
            env = {
                "CLUSTER_SPEC": json.dumps(
                    {
                        "cluster": {f"workerpool{p}": hosts for p, hosts in cluster.items()},
                        "environment": "cloud",
                        "task": task,
                    },
                    separators=(",", ":"),
                ),
                "TF_CONFIG": json.dumps(
                    {
                        "cluster": {TF_NAMES[p]: hosts for p, hosts in cluster.items() if p < 3},
                        "task": {"type": TF_NAMES[pool], "index": index},
                        "environment": "cloud",
                    },
                    separators=(",", ":"),
                ),
                "MASTER_ADDR": chief.rpartition(":")[0],
                "MASTER_PORT": chief.rpartition(":")[2],
                "WORLD_SIZE": str(len(world)),
                "JAX_COORDINATOR_ADDRESS": chief,
                "JAX_NUM_PROCESSES": str(len(world)),
                "AIP_MODEL_DIR": f"gs://bucket/jobs/{job_id}/model/",
                "CLOUD_ML_JOB_ID": job_id,
                "MLDIAG_API_URL": "http://mldiag.example:8080",
                "MLDIAG_TOKEN": "run-token",
                "MLDIAG_RUN_ID": job_id,
                "MLDIAG_REPLICA": key.replica_name,
                "MLDIAG_ATTEMPT": str(attempt),
            }
            if (pool, index) in world:
                env["RANK"] = env["JAX_PROCESS_ID"] = str(world.index((pool, index)))
            host_port = cluster[pool][index]
            commands.append(
                StartReplica(
                    executor_id=executor_id,
                    replica=key,
                    project="p",
                    location="us-central1",
                    launch=ReplicaLaunch(
                        image_uri=image_uri,
                        command=list(command),
                        env=env,
                        resources=resources,
                        port=int(host_port.rpartition(":")[2]),
                        logs_uri=f"{logs_root}/{key.replica_name}/attempt-{attempt}",
                    ),
                    run_token="run-token",
                    deadline=deadline,
                    # A fixed id and time: rendered manifests are compared with golden files.
                    event_id=f"00000000-0000-4000-8000-{port:012d}",
                    occurred_at=deadline,
                )
            )
            port += 1
    return commands

"""What the scheduler says, as pure functions: the commands to executors (``StartReplica``
with the replica's whole launch, ``StopReplica``) and a failed job's error.

Commands have ids derived from what they command, so staging the same one twice (a
redelivered fact, a second pass) publishes it once: the outbox keeps one row per id and
JetStream drops a repeated ``Nats-Msg-Id``.
"""

import uuid
from collections.abc import Mapping, Sequence
from typing import Literal

from mldiag_schemas.jobs import ERROR_DOMAIN, ERROR_INFO_TYPE, RpcStatus
from mldiag_schemas.replicas import (
    ExitReason,
    ReplicaKey,
    ReplicaLaunch,
    Resources,
    StartReplica,
    StopReplica,
)
from mldiag_training.scheduler.environment import (
    PlatformPlace,
    ReplicaPlace,
    logs_uri,
    replica_env,
)
from mldiag_training.scheduler.repository import JobRow, ReplicaRow

StopReason = Literal["cancelled", "timeout", "restart", "superseded", "failed", "completed"]
"""Why a replica is stopped (``StopReplica.reason``)."""

MESSAGE_TAIL = 2000
"""How much of an exit's message a replica and a job's error keep."""

_IDS = uuid.UUID("6f1c8d52-3b0e-4d0a-9a55-7d1f0e0c2a11")

# google.rpc.Code numbers a job's error uses.
CANCELLED_CODE = 1
INVALID_ARGUMENT_CODE = 3
DEADLINE_EXCEEDED_CODE = 4
FAILED_PRECONDITION_CODE = 9
INTERNAL_CODE = 13


def replica_key(replica: ReplicaRow) -> ReplicaKey:
    """The replica's current attempt."""
    return ReplicaKey(
        job_id=replica.job_id, pool=replica.pool, index=replica.index, attempt=replica.attempt
    )


def start_replica(
    job: JobRow,
    replica: ReplicaRow,
    cluster: Mapping[int, Sequence[str]],
    platform: PlatformPlace,
) -> StartReplica:
    """The command that starts ``replica``'s current attempt where it is placed."""
    pool = job.spec.worker_pool_specs[replica.pool]
    place = ReplicaPlace(
        job_id=job.job_id,
        project=job.project,
        location=job.location,
        pool=replica.pool,
        index=replica.index,
        attempt=replica.attempt,
        cluster=cluster,
    )
    env = replica_env(job.spec, place, platform)
    resources = replica.resources or Resources(cpus=0, memory_bytes=0)
    logs = logs_uri(platform.storage_url, job.job_id, replica.pool, replica.index, replica.attempt)
    if pool.container_spec is not None:
        spec = pool.container_spec
        launch = ReplicaLaunch(
            image_uri=spec.image_uri,
            command=[*spec.command, *spec.args],
            env=env,
            resources=resources,
            port=replica.port or 1,
            logs_uri=logs,
        )
    else:
        package = pool.python_package_spec
        assert package is not None  # noqa: S101  # a non-empty pool has one task
        launch = ReplicaLaunch(
            image_uri=package.executor_image_uri,
            package_uris=list(package.package_uris),
            python_module=package.python_module,
            args=list(package.args),
            env=env,
            resources=resources,
            port=replica.port or 1,
            logs_uri=logs,
        )
    key = replica_key(replica)
    return StartReplica(
        event_id=uuid.uuid5(_IDS, f"start:{key.job_id}:{key.pool}:{key.index}:{key.attempt}"),
        executor_id=replica.executor_id or "",
        replica=key,
        project=job.project,
        location=job.location,
        launch=launch,
        run_token=platform.token,
        deadline=job.deadline,
    )


def stop_replica(
    executor_id: str, key: ReplicaKey, reason: StopReason, grace_seconds: float
) -> StopReplica:
    """The command that stops one attempt on ``executor_id``."""
    name = f"stop:{executor_id}:{key.job_id}:{key.pool}:{key.index}:{key.attempt}:{reason}"
    return StopReplica(
        event_id=uuid.uuid5(_IDS, name),
        executor_id=executor_id,
        replica=key,
        reason=reason,
        grace_seconds=grace_seconds,
    )


def failure_status(replica: ReplicaRow, reason: ExitReason, why: str) -> RpcStatus:
    """A failed job's error: the replica, how its attempt ended, and its message's tail.

    Codes: 3 (INVALID_ARGUMENT, what Vertex answers) when the replica's own code exited or
    was killed, 9 (FAILED_PRECONDITION) when it could not start or was refused, 13
    (INTERNAL) when it was lost with its executor.
    """
    name = f"workerpool{replica.pool}-{replica.index}"
    if reason == "exited":
        what = f"exited with a non-zero status of {replica.exit_code}"
        code = INVALID_ARGUMENT_CODE
    elif reason == "killed":
        what = f"was killed (status {replica.exit_code})"
        code = INVALID_ARGUMENT_CODE
    elif reason == "lost":
        what = "was lost with its executor"
        code = INTERNAL_CODE
    else:
        what = "could not start" if reason == "setup_failed" else "was refused by its executor"
        code = FAILED_PRECONDITION_CODE
    message = f"The replica {name} {what} (attempt {replica.attempt}); the job failed: {why}."
    if replica.message:
        message += f"\n{replica.message[-MESSAGE_TAIL:]}"
    return RpcStatus(
        code=code,
        message=message,
        # A google.rpc.Status's details are protobuf Any messages: each needs its @type, or
        # Google's clients cannot parse the job at all. ErrorInfo's metadata holds strings.
        details=[
            {
                "@type": ERROR_INFO_TYPE,
                "reason": f"replica_{reason}",
                "domain": ERROR_DOMAIN,
                "metadata": {
                    "replica": name,
                    "attempt": str(replica.attempt),
                    "exitCode": "" if replica.exit_code is None else str(replica.exit_code),
                },
            }
        ],
    )

"""Builders shared by the executor's tests."""

from datetime import UTC, datetime, timedelta

from mldiag_schemas.replicas import ReplicaKey, ReplicaLaunch, Resources, StartReplica


def start_command(
    *,
    executor_id: str,
    logs_uri: str,
    command: list[str] | None = None,
    job_id: str = "1234",
    pool: int = 0,
    index: int = 0,
    attempt: int = 0,
    env: dict[str, str] | None = None,
    image_uri: str = "python-test",
    package_uris: list[str] | None = None,
    python_module: str = "",
    args: list[str] | None = None,
    deadline_seconds: float = 3600,
) -> StartReplica:
    """A ``StartReplica`` as the scheduler sends it (a small CPU replica)."""
    return StartReplica(
        executor_id=executor_id,
        replica=ReplicaKey(job_id=job_id, pool=pool, index=index, attempt=attempt),
        project="p",
        location="us-central1",
        launch=ReplicaLaunch(
            image_uri=image_uri,
            command=command or [],
            package_uris=package_uris or [],
            python_module=python_module,
            args=args or [],
            env={"MLDIAG_RUN_ID": job_id, **(env or {})},
            resources=Resources(cpus=1, memory_bytes=1 << 30),
            port=20000 + index,
            logs_uri=logs_uri,
        ),
        run_token="secret-token",
        deadline=datetime.now(UTC) + timedelta(seconds=deadline_seconds),
    )

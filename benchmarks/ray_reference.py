"""Raw Ray, the reference for the Ray executor: ``ray job submit`` of a command until its
process runs.

Run: ``.venv/bin/python benchmarks/ray_reference.py [--jobs N]``

A one-node Ray head is started here (its own temp dir under /tmp, free ports, the
dashboard for the job server) and stopped by process group at the end; it never touches
another Ray cluster. Next to raw Ray, the same command through mldiag's Ray backend alone
(:func:`ray_backend_latencies`: no bus, no scheduler, no launcher).

Each job's command records ``time.time()`` as its first statement; the figure is that
minus the time just before ``JobSubmissionClient.submit_job`` (so it includes Ray's job
supervisor and the interpreter's start) or ``RayBackend.start``, the same clock as
``benchmarks/jobs.py`` uses for mldiag jobs.
:func:`raw_ray_latencies` is what ``jobs.py`` calls to print both side by side.
"""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _support import emit, free_port, percentile, wait_http

FIRST_STATEMENT = "import time, pathlib; pathlib.Path({path!r}).write_text(repr(time.time()))"


def raw_ray_latencies(address: str, jobs: int, scratch: Path, timeout: float = 120) -> list[float]:
    """Seconds from ``submit_job`` to the command's first statement, for ``jobs`` jobs
    submitted one after another to the job server at ``address`` (``http://host:8265``)."""
    from ray.job_submission import JobStatus, JobSubmissionClient  # noqa: PLC0415

    client = JobSubmissionClient(address)
    samples: list[float] = []
    for number in range(jobs):
        marker = scratch / f"ray-{number}.t"
        # A shell reads the entrypoint: the statement goes in double quotes.
        entrypoint = f'{sys.executable} -c "{FIRST_STATEMENT.format(path=str(marker))}"'
        began = time.time()
        job = client.submit_job(entrypoint=entrypoint)
        until = time.monotonic() + timeout
        while not marker.exists():
            if time.monotonic() > until:
                raise TimeoutError(f"job {job}: {client.get_job_status(job)}")
            time.sleep(0.005)
        while not (text := marker.read_text()):
            time.sleep(0.001)
        samples.append(float(text) - began)
        while client.get_job_status(job) not in {
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.STOPPED,
        }:
            time.sleep(0.05)
    return samples


def ray_backend_latencies(gcs_address: str, jobs: int, scratch: Path) -> list[float]:
    """The same figure through mldiag's Ray backend alone (no bus, no scheduler): seconds
    from ``RayBackend.start`` to the command's first statement, each a one-replica job."""
    import asyncio  # noqa: PLC0415

    from mldiag_executor.backends.ray import RayBackend, RayBackendSettings  # noqa: PLC0415
    from mldiag_executor.launch import LaunchConfig, Storage, prepare  # noqa: PLC0415
    from mldiag_schemas.replicas import (  # noqa: PLC0415
        ReplicaKey,
        ReplicaLaunch,
        Resources,
        StartReplica,
    )

    config = LaunchConfig(
        storage=Storage(f"file://{scratch / 'store'}"),
        state_dir=scratch / "state",
        images={"python": sys.executable},
    )

    async def run() -> list[float]:
        backend = RayBackend(
            executor_id="bench",
            storage=config.storage,
            state_dir=config.state_dir,
            settings=RayBackendSettings(
                address=gcs_address, node_ip_address="127.0.0.2", group_linger_seconds=0
            ),
            # The replica's own program, without mldiag's launcher: the same as raw Ray runs.
            launcher=lambda _name, _exit: ["env"],
        )
        await backend.connect()
        samples: list[float] = []
        try:
            for number in range(jobs):
                marker = scratch / f"backend-{number}.t"
                command = StartReplica(
                    executor_id="bench",
                    replica=ReplicaKey(job_id=str(900 + number), pool=0, index=0, attempt=0),
                    project="p",
                    location="l",
                    launch=ReplicaLaunch(
                        image_uri="python",
                        command=["python", "-c", FIRST_STATEMENT.format(path=str(marker))],
                        resources=Resources(cpus=1, memory_bytes=0),
                        port=20000,
                        logs_uri=f"file://{scratch}/logs/{number}",
                    ),
                    run_token="t",  # noqa: S106  # no API behind it
                    deadline=datetime.now(UTC) + timedelta(hours=1),
                )
                launch = await prepare(command, config)
                began = time.time()
                await backend.start(command, launch)
                ended = await asyncio.wait_for(anext(backend.exits()), 120)
                await backend.reported(ended.key)
                samples.append(float(marker.read_text()) - began)
        finally:
            await backend.close()
        return samples

    return asyncio.run(run())


@contextlib.contextmanager
def ray_head(cpus: int = 4) -> Iterator[tuple[str, str]]:
    """A one-node Ray head with its job server; yields the job server's address and the
    cluster's (GCS) address."""
    root = Path(tempfile.mkdtemp(prefix="mldiag-rayref-", dir="/tmp"))
    dashboard = free_port()
    gcs = free_port()
    ray = str(Path(sys.executable).parent / "ray")
    process = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--node-ip-address=127.0.0.2",
            f"--port={gcs}",
            f"--temp-dir={root}",
            f"--num-cpus={cpus}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={free_port()}",
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            "--disable-usage-stats",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its daemons keep this group: stopped together below
    )
    try:
        process.wait(timeout=600)
        address = f"http://127.0.0.1:{dashboard}"
        wait_http(f"{address}/api/version", timeout=120)
        yield address, f"127.0.0.2:{gcs}"
    finally:
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signum)
            time.sleep(2 if signum == signal.SIGTERM else 0)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="mldiag-rayref-") as folder,
        ray_head() as (address, gcs),
    ):
        raw = raw_ray_latencies(address, args.jobs, Path(folder))
        backend = ray_backend_latencies(gcs, args.jobs, Path(folder))
    for label, samples in (
        ("raw `ray job submit`", raw),
        ("mldiag Ray backend (start → process)", backend),
    ):
        emit(
            f"{label:40} {len(samples)} jobs: p50 {percentile(samples, 50) * 1000:6.0f} ms, "
            f"p95 {percentile(samples, 95) * 1000:6.0f} ms"
        )


if __name__ == "__main__":
    main()

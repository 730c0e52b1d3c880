"""Raw Ray, the reference for the Ray executor: ``ray job submit`` of a command until its
process runs.

Run: ``.venv/bin/python benchmarks/ray_reference.py [--jobs N] [--address http://…:8265]``

Without ``--address`` a one-node Ray head is started here (its own temp dir under /tmp,
free ports, the dashboard for the job server) and stopped by process group at the end;
it never touches another Ray cluster. Each job's command records ``time.time()`` as its
first statement; the figure is that minus the time just before
``JobSubmissionClient.submit_job`` (so it includes Ray's job supervisor and the
interpreter's start), the same clock as ``benchmarks/jobs.py`` uses for mldiag jobs.
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


@contextlib.contextmanager
def ray_head(cpus: int = 4) -> Iterator[str]:
    """A one-node Ray head with its job server; yields the job server's address."""
    root = Path(tempfile.mkdtemp(prefix="mldiag-rayref-", dir="/tmp"))
    dashboard = free_port()
    ray = str(Path(sys.executable).parent / "ray")
    process = subprocess.Popen(
        [
            ray,
            "start",
            "--head",
            "--node-ip-address=127.0.0.2",
            f"--port={free_port()}",
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
        yield address
    finally:
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signum)
            time.sleep(2 if signum == signal.SIGTERM else 0)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--address", default="", help="a job server; default: start a head")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="mldiag-rayref-") as folder,
        contextlib.ExitStack() as stack,
    ):
        address = args.address or stack.enter_context(ray_head())
        samples = raw_ray_latencies(address, args.jobs, Path(folder))
    emit(
        f"raw `ray job submit` → process running, {len(samples)} jobs: "
        f"p50 {percentile(samples, 50) * 1000:.0f} ms, p95 {percentile(samples, 95) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()

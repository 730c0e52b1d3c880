# The stack harness is imported from tests/ once that folder is on sys.path (below).
# ruff: noqa: E402
"""Custom jobs: how fast a submitted job runs, and whether a burst of them all finishes.

Run: ``.venv/bin/python benchmarks/jobs.py [--latency-jobs N] [--burst-jobs B]
[--burst-cpus C] [--no-ray]``

Stack: ``mldiag up --detach`` in a temporary home on free ports (embedded NATS and
PostgreSQL, every service, the local executor), called at its one API address.

1. submit → first replica running, N jobs one after another (default 50): the clock runs
   from just before the create POST until the replica's own command records ``time.time()``
   as its first statement (so it includes the launcher and the interpreter's start).
   Next to it, the raw floor: the same command started by ``subprocess.Popen`` here.
   Goal: p50 ≤ 300 ms.
2. the same on the Ray executor (a local Ray head started here, an executor with
   ``--backend ray`` joining the stack) next to a raw ``ray job submit`` of the same command
   (``JobSubmissionClient.submit_job``). Goal: within 1.5 times raw Ray.
3. burst: B small jobs (default 200) created at once while the local executor's capacity
   holds C CPUs (default 2: a handful run at a time), the training service killed -9 once a
   third have finished (its supervisor starts it again). Reported: succeeded, failed, lost
   (never terminal), run twice (a replica that started more than once), and wall time.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from _support import emit, free_port, percentile, process
from ray_reference import raw_ray_latencies, ray_head

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS)]
from stacks import Stack, running_stack  # found through the path set above

PYTHON = sys.executable
STAMP = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time()))"
TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
RAY_MACHINE = "ray-bench"
"""A machine type only the Ray head fits (see the stack's environment in main)."""
RAY_EXECUTOR_LOG = Path(tempfile.gettempdir()) / "mldiag-bench-ray-executor.log"


def _create(client: httpx.Client, command: list[str], machine: str = "local-small") -> str:
    body = {
        "displayName": f"bench-{uuid.uuid4().hex[:6]}",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": machine},
                    "replicaCount": "1",
                    "containerSpec": {"imageUri": "python", "command": command},
                }
            ]
        },
    }
    answer = client.post("/v1/projects/default/locations/local/customJobs", json=body)
    answer.raise_for_status()
    name: str = answer.json()["name"]
    return name


def _wait_file(path: Path, timeout: float = 60.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return float(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.002)
    raise RuntimeError(f"{path} was never written")


def _wait_terminal(client: httpx.Client, names: list[str], timeout: float) -> dict[str, str]:
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(states) < len(names):
        for name in names:
            if name not in states:
                answer = client.get(f"/v1/{name}")
                if answer.status_code == 503:  # the training service is restarting
                    time.sleep(0.5)
                    break
                state = answer.json()["state"]
                if state in TERMINAL:
                    states[name] = state
        time.sleep(0.5)
    return states


def _latency(
    client: httpx.Client, jobs: int, scratch: Path, machine: str = "local-small"
) -> list[float]:
    samples: list[float] = []
    for number in range(jobs):
        stamp = scratch / f"latency-{uuid.uuid4().hex}"
        submitted = time.time()
        name = _create(client, ["python", "-c", STAMP, str(stamp)], machine)
        samples.append(_wait_file(stamp) - submitted)
        _wait_terminal(client, [name], timeout=60)
        if number % 10 == 9:
            emit(f"  … {number + 1} jobs")
    return samples


def _raw_floor(jobs: int, scratch: Path) -> list[float]:
    samples: list[float] = []
    for _ in range(jobs):
        stamp = scratch / f"raw-{uuid.uuid4().hex}"
        started = time.time()
        process = subprocess.Popen([PYTHON, "-c", STAMP, str(stamp)])  # fixed argv
        samples.append(_wait_file(stamp) - started)
        process.wait()
    return samples


def _ray_executor(stack: Stack, gcs: str, scratch: Path) -> Any:
    """A second executor of the stack, on the Ray cluster at ``gcs``, with the executor's
    own NATS credentials from the stack's secrets."""
    secrets = json.loads((stack.home / "secrets" / "substrate.json").read_text())
    env = {
        "MLDIAG_NATS_URL": stack.component("nats")["url"],
        "MLDIAG_NATS_USER": "executor",
        "MLDIAG_NATS_PASSWORD": secrets["nats-executor"],
        "MLDIAG_STORAGE_URL": f"file://{stack.home / 'storage'}",
        "MLDIAG_EXECUTOR_BACKEND": "ray",
        "MLDIAG_EXECUTOR_EXECUTOR_ID": "ray-bench",
        "MLDIAG_EXECUTOR_PORT": str(free_port()),
        "MLDIAG_EXECUTOR_FIRST_PORT": str(free_port()),
        "MLDIAG_EXECUTOR_PORT_COUNT": "50",
        "MLDIAG_EXECUTOR_STATE_DIR": str(scratch / "ray-executor"),
        "MLDIAG_EXECUTOR_IMAGES": json.dumps({"python": PYTHON}),
        "MLDIAG_EXECUTOR_RAY_ADDRESS": gcs,
        "MLDIAG_EXECUTOR_RAY_NODE_IP_ADDRESS": "127.0.0.2",
    }
    emit(f"  the Ray executor's log: {RAY_EXECUTOR_LOG}")
    return process([PYTHON, "-m", "mldiag_executor"], env, RAY_EXECUTOR_LOG)


def _wait_executor(client: httpx.Client, machine: str, timeout: float = 120) -> None:
    """Until a job on ``machine`` is accepted: the Ray executor has announced itself."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            name = _create(client, ["python", "-c", "pass"], machine)
        except httpx.HTTPStatusError:  # no executor fits it yet: refused at create
            time.sleep(1)
            continue
        if _wait_terminal(client, [name], 120).get(name) == "JOB_STATE_SUCCEEDED":
            return
        time.sleep(1)
    raise RuntimeError("the Ray executor never ran a job")


def _row(label: str, samples: list[float], goal: str = "") -> None:
    emit(
        f"  {label:<38} p50 {percentile(samples, 50) * 1000:7.0f} ms   "
        f"p95 {percentile(samples, 95) * 1000:7.0f} ms   n={len(samples)}   {goal}"
    )


def _burst(stack: Stack, client: httpx.Client, jobs: int, scratch: Path) -> dict[str, Any]:
    ledger = scratch / "burst"
    ledger.mkdir()
    # Each replica appends one line per start to its own file: two lines = ran twice.
    script = "import sys; open(sys.argv[1], 'a').write('start\\n'); import time; time.sleep(0.2)"
    started = time.monotonic()
    names = [
        _create(client, ["python", "-c", script, str(ledger / f"{number}.log")])
        for number in range(jobs)
    ]
    created = time.monotonic() - started
    killed_at = None
    while killed_at is None:
        finished = sum(1 for path in ledger.iterdir() if path.stat().st_size)
        if finished >= jobs // 3:
            os.kill(stack.service_pid("training"), signal.SIGKILL)
            killed_at = time.monotonic() - started
        time.sleep(0.05)
    states = _wait_terminal(client, names, timeout=600)
    wall = time.monotonic() - started
    starts = [
        len((ledger / f"{number}.log").read_text().splitlines())
        if (ledger / f"{number}.log").exists()
        else 0
        for number in range(jobs)
    ]
    return {
        "created_s": created,
        "killed_at_s": killed_at,
        "succeeded": sum(1 for state in states.values() if state == "JOB_STATE_SUCCEEDED"),
        "failed": sum(1 for state in states.values() if state != "JOB_STATE_SUCCEEDED"),
        "lost": jobs - len(states),
        "ran_twice": sum(1 for count in starts if count > 1),
        "never_ran": sum(1 for count in starts if count == 0),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--burst-jobs", type=int, default=200)
    parser.add_argument("--burst-cpus", type=float, default=2.0)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    args = parser.parse_args()

    env = {
        # limited capacity for the burst: `local-small` replicas take half a CPU each
        "MLDIAG_EXECUTOR_CPUS": str(args.burst_cpus),
        "MLDIAG_EXECUTOR_CPU_OVERCOMMIT": "1",
        # 3 CPUs: more than the local executor has (2), less than the Ray head (4); little
        # memory, so what the machine has free at the moment does not decide where it fits
        "MLDIAG_TRAINING_MACHINE_TYPES": json.dumps({RAY_MACHINE: {"cpus": 3, "memoryGb": 1}}),
    }
    with tempfile.TemporaryDirectory(prefix="mldiag-bench-jobs-") as folder:
        scratch = Path(folder)
        scratch.chmod(0o755)
        with running_stack("mldiag-bench-jobs-", env) as stack:
            client = httpx.Client(base_url=stack.api, headers=stack.auth, timeout=30)
            emit(f"stack up at {stack.api}")
            emit(f"1. submit → first replica running, {args.latency_jobs} jobs, local executor")
            local = _latency(client, args.latency_jobs, scratch)
            raw = _raw_floor(args.latency_jobs, scratch)
            _row("mldiag job (local executor)", local, "goal p50 ≤ 300 ms")
            _row("raw subprocess.Popen (the floor)", raw)
            if not args.no_ray:
                ray_jobs = min(args.latency_jobs, 20)
                emit(f"2. submit → first replica running, {ray_jobs} jobs, Ray executor")
                with ray_head(cpus=4) as (dashboard, gcs), _ray_executor(stack, gcs, scratch):
                    _wait_executor(client, RAY_MACHINE)
                    on_ray = _latency(client, ray_jobs, scratch, RAY_MACHINE)
                    raw_ray = raw_ray_latencies(dashboard, ray_jobs, scratch)
                _row("mldiag job (Ray executor)", on_ray, "goal within 1.5 times raw Ray")
                _row("raw `ray job submit` (the reference)", raw_ray)
            emit(
                f"3. burst: {args.burst_jobs} jobs at once on {args.burst_cpus} CPUs, "
                "training killed -9 once"
            )
            burst = _burst(stack, client, args.burst_jobs, scratch)
            emit("  " + json.dumps(burst))


if __name__ == "__main__":
    main()

# The stack harness is imported from tests/ once that folder is on sys.path (below).
# ruff: noqa: E402
"""Tuning jobs on a running platform: the overhead between trials, a study that survives a
kill -9 of its controller, and what median stopping saves.

Run: ``.venv/bin/python benchmarks/tuning_stack.py [--overhead-trials N] [--crash-trials T]
[--stopping-trials S]``

Stack: the whole platform in a temporary home on free ports (``tests/stacks.py``), the local
executor running trials with this interpreter. Trials are tiny Python scripts that write the
``cloudml-hypertune`` metric file themselves (its exact format, no library needed here).

1. overhead: a study of N trials (default 20, about a second each), one at a time; each
   trial stamps ``time.time()`` as its first statement and just before it exits. Figure:
   the next trial's first statement minus the previous trial's last one. Goal: p50 ≤ 500
   ms. Next to it, the raw floor: a Python process started by ``subprocess.Popen`` here.
2. crash: a study of T trials (default 100), 4 in parallel; the training service (the
   controller) is killed -9 once a third of the trials have run (its supervisor starts it
   again). Reported: the job's state, trials created, succeeded, infeasible, trials that ran
   twice (a ledger line per start) and never ran, and wall time. Goal: T succeeded, none lost,
   none twice.
3. stopping: the same study of S trials (default 16, 2 in parallel, 40 steps of 100 ms each
   with learning curves) with and without ``medianAutomatedStoppingSpec``, same seed.
   Reported: trial-seconds spent (sum of every trial's run time from its stamps), trials
   stopped early, and the best final value of each.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from _support import emit, percentile

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS)]
from stacks import Stack, running_stack  # found through the path set above

PYTHON = sys.executable
PARENT = "/v1/projects/default/locations/local"
TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}

# A trial: stamps its start, reports `loss` over `steps` steps in the cloudml-hypertune file
# format (JSON Lines, sorted keys, values as strings, the whole file rewritten per report),
# stamps its end. The loss falls towards a quality set by x and y (Branin's function), so a
# bad trial is visibly bad early: what median stopping needs.
TRIAL = r"""
import time
started = time.time()
import json, math, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
ledger, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
trial = os.environ.get("CLOUD_ML_TRIAL_ID", "0")
with open(os.path.join(ledger, trial + ".start"), "a") as out:
    out.write(repr(started) + "\n")
x, y = float(args["x"]), float(args["y"])
quality = (y - 5.1 / (4 * math.pi**2) * x**2 + 5 / math.pi * x - 6) ** 2 + 10 * (
    1 - 1 / (8 * math.pi)) * math.cos(x) + 10
path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
lines = []
for step in range(1, steps + 1):
    time.sleep(pause)
    loss = quality + 50.0 / step
    lines.append(json.dumps({"global_step": str(step), "loss": repr(loss), "checkpoint_path": "",
                             "timestamp": time.time(), "trial": trial}, sort_keys=True))
    with open(path, "w") as out:
        out.write("\n".join(lines[-100:]) + "\n")
with open(os.path.join(ledger, trial + ".end"), "w") as out:
    out.write(repr(time.time()))
"""


def _study(
    name: str,
    script: Path,
    ledger: Path,
    trials: int,
    parallel: int,
    steps: int,
    pause: float,
    *,
    stopping: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
        "parameters": [
            {"parameterId": "x", "doubleValueSpec": {"minValue": -5, "maxValue": 10}},
            {"parameterId": "y", "doubleValueSpec": {"minValue": 0, "maxValue": 15}},
        ],
        "measurementSelectionType": "LAST_MEASUREMENT",
    }
    if stopping:
        spec["medianAutomatedStoppingSpec"] = {}
    return {
        "displayName": name,
        "studySpec": spec,
        "maxTrialCount": trials,
        "parallelTrialCount": parallel,
        "maxFailedTrialCount": trials,
        "trialJobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "local-small"},
                    "replicaCount": "1",
                    "containerSpec": {
                        "imageUri": "python",
                        "command": ["python", str(script), str(ledger), str(steps), str(pause)],
                    },
                }
            ]
        },
    }


def _run_study(client: httpx.Client, body: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    answer = client.post(f"{PARENT}/hyperparameterTuningJobs", json=body)
    answer.raise_for_status()
    name: str = answer.json()["name"]
    return _wait_study(client, name, timeout)


def _wait_study(client: httpx.Client, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            answer = client.get(f"/v1/{name}")
        except httpx.TransportError:  # the training service is restarting
            time.sleep(0.5)
            continue
        if answer.status_code == 503:
            time.sleep(0.5)
            continue
        job = answer.json()
        if job["state"] in TERMINAL:
            return job
        time.sleep(0.5)
    raise RuntimeError(f"{name} did not end in {timeout:.0f} s (state {job.get('state')})")


def _stamps(ledger: Path, suffix: str) -> dict[str, list[float]]:
    stamps: dict[str, list[float]] = {}
    for path in ledger.glob(f"*{suffix}"):
        stamps[path.name.removesuffix(suffix)] = [
            float(line) for line in path.read_text().split() if line
        ]
    return stamps


def _raw_floor(count: int, scratch: Path) -> list[float]:
    samples = []
    for _ in range(count):
        stamp = scratch / f"raw-{uuid.uuid4().hex}"
        started = time.time()
        code = f"import time; open({str(stamp)!r}, 'w').write(repr(time.time()))"
        subprocess.run([PYTHON, "-c", code], check=True)  # fixed argv
        samples.append(float(stamp.read_text()) - started)
    return samples


def _final(trial: dict[str, Any]) -> float | None:
    for metric in (trial.get("finalMeasurement") or {}).get("metrics", []):
        if metric["metricId"] == "loss":
            return float(metric["value"])
    return None


def overhead(client: httpx.Client, scratch: Path, trials: int) -> None:
    ledger = scratch / "overhead"
    ledger.mkdir()
    # Trials of about a second: the replica's launcher has attached to the run by the time
    # the program ends (a program shorter than the launcher's own start, ~0.6 s here, waits
    # for it at its end), as it has for any real trial.
    body = _study("bench-overhead", scratch / "trial.py", ledger, trials, 1, 20, 0.05)
    job = _run_study(client, body)
    starts, ends = _stamps(ledger, ".start"), _stamps(ledger, ".end")
    gaps = [
        starts[str(number + 1)][0] - ends[str(number)][0]
        for number in range(1, trials)
        if str(number + 1) in starts and str(number) in ends
    ]
    raw = _raw_floor(20, scratch)
    emit(f"  study {job['state']}, {len(job.get('trials', []))} trials")
    label = "previous trial ends → next trial starts"
    emit(
        f"  {label:<44} p50 {percentile(gaps, 50) * 1000:6.0f} ms"
        f"   p95 {percentile(gaps, 95) * 1000:6.0f} ms   n={len(gaps)}   goal p50 ≤ 500 ms"
    )
    emit(
        f"  {'raw subprocess start (the floor)':<44} p50 {percentile(raw, 50) * 1000:6.0f} ms"
        f"   p95 {percentile(raw, 95) * 1000:6.0f} ms   n={len(raw)}"
    )


def crash(stack: Stack, client: httpx.Client, scratch: Path, trials: int) -> None:
    ledger = scratch / "crash"
    ledger.mkdir()
    body = _study("bench-crash", scratch / "trial.py", ledger, trials, 4, 2, 0.05)
    started = time.monotonic()
    answer = client.post(f"{PARENT}/hyperparameterTuningJobs", json=body)
    answer.raise_for_status()
    name = answer.json()["name"]
    while len(list(ledger.glob("*.end"))) < trials // 3:
        time.sleep(0.05)
    os.kill(stack.service_pid("training"), signal.SIGKILL)
    killed_at = time.monotonic() - started
    job = _wait_study(client, name, timeout=1800)
    wall = time.monotonic() - started
    starts = _stamps(ledger, ".start")
    states = [trial["state"] for trial in job.get("trials", [])]
    ids = [trial["id"] for trial in job.get("trials", [])]
    figures = {
        "state": job["state"],
        "trials": len(states),
        "distinct_ids": len(set(ids)),
        "succeeded": states.count("SUCCEEDED"),
        "infeasible": states.count("INFEASIBLE"),
        "ran_twice": sum(1 for lines in starts.values() if len(lines) > 1),
        "never_ran": trials - len(starts),
        "killed_at_s": round(killed_at, 1),
        "wall_s": round(wall, 1),
    }
    emit("  " + json.dumps(figures))
    for trial in job.get("trials", []):
        if trial["state"] != "SUCCEEDED":
            emit(f"  trial {trial['id']} {trial['state']}: {trial.get('infeasibleReason', '')}")
    emit(f"  goal: {trials} succeeded, 0 lost, 0 twice")
    if figures["succeeded"] != trials or figures["ran_twice"] or figures["never_ran"]:
        kept = Path(tempfile.gettempdir()) / "mldiag-bench-tuning-logs"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(stack.home / "logs", kept)
        twice = sorted(trial for trial, lines in starts.items() if len(lines) > 1)
        emit(f"  the stack's logs are kept in {kept}; trials that ran twice: {twice}")


def stopping(client: httpx.Client, scratch: Path, trials: int) -> None:
    rows = []
    for label, enabled in (("without median stopping", False), ("with median stopping", True)):
        ledger = scratch / f"stopping-{enabled}"
        ledger.mkdir()
        body = _study(
            f"bench-stopping-{enabled}".lower(),
            scratch / "trial.py",
            ledger,
            trials,
            2,
            40,
            0.1,
            stopping=enabled,
        )
        job = _run_study(client, body)
        starts, ends = _stamps(ledger, ".start"), _stamps(ledger, ".end")
        spent = 0.0
        for trial in job.get("trials", []):
            start = starts.get(trial["id"], [None])[0]
            # A stopped trial never wrote its end stamp: its end is the trial's endTime.
            end = ends.get(trial["id"], [None])[0] or _epoch(trial.get("endTime"))
            if start is not None and end is not None:
                spent += max(0.0, end - start)
        finals = [value for value in map(_final, job.get("trials", [])) if value is not None]
        early = sum(1 for trial in job.get("trials", []) if trial["id"] not in ends)
        rows.append((label, spent, early, min(finals) if finals else float("nan"), job["state"]))
    for label, spent, early, best, state in rows:
        emit(
            f"  {label:<26} trial-seconds {spent:7.1f}   stopped early {early:3d}   "
            f"best loss {best:8.3f}   ({state})"
        )


def _epoch(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    from datetime import datetime  # noqa: PLC0415  # only here

    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overhead-trials", type=int, default=20)
    parser.add_argument("--crash-trials", type=int, default=100)
    parser.add_argument("--stopping-trials", type=int, default=16)
    parser.add_argument(
        "--parts", default="overhead,crash,stopping", help="comma-separated parts to run"
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    env = {"MLDIAG_EXECUTOR_IMAGES": json.dumps({"python": PYTHON})}
    with tempfile.TemporaryDirectory(prefix="mldiag-bench-tuning-") as folder:
        scratch = Path(folder)
        scratch.chmod(0o755)
        (scratch / "trial.py").write_text(TRIAL)
        with running_stack("mldiag-bench-tuning-", env) as stack:
            client = httpx.Client(base_url=stack.api, headers=stack.auth, timeout=30)
            emit(f"stack up at {stack.api}")
            if "overhead" in parts:
                emit(f"1. overhead between trials, {args.overhead_trials} trials one at a time")
                overhead(client, scratch, args.overhead_trials)
            if "crash" in parts:
                emit(f"2. {args.crash_trials} trials, 4 in parallel, training killed -9 once")
                crash(stack, client, scratch, args.crash_trials)
            if "stopping" in parts:
                emit(f"3. median stopping, {args.stopping_trials} trials, 2 in parallel")
                stopping(client, scratch, args.stopping_trials)


if __name__ == "__main__":
    main()

"""Training work run for real: custom jobs through training pipelines (each importing the
model its job wrote), and a hyperparameter tuning study, all placed on the local executor.

Every replica is this interpreter (the executor's image table maps ``python`` to it), so the
scripts below have numpy and the SDK. They are written to a scratch folder and run by path.
"""

import time
from pathlib import Path
from typing import Any

import httpx

PARENT = "/v1/projects/default/locations/local"
TERMINAL_JOB = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
TERMINAL_PIPELINE = {
    "PIPELINE_STATE_SUCCEEDED",
    "PIPELINE_STATE_FAILED",
    "PIPELINE_STATE_CANCELLED",
}
CUSTOM_TASK = "gs://google-cloud-aiplatform/schema/trainingjob/definition/custom_task_1.0.0.yaml"
BUCKET = "gs://mlp-models"

# A custom job's program: the MLP of the monitored runs at a width and learning rate of its
# arguments, attached to the job's run by ``mldiag.init()`` (the executor sets MLDIAG_RUN_ID),
# printing its progress (the job's log), saving its weights to AIP_MODEL_DIR at the end.
TRAIN = r"""
import argparse, math, os, time
import numpy as np
import mldiag

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.3)
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--steps", type=int, default=400)
args = parser.parse_args()
rng = np.random.default_rng(7)
x = rng.normal(size=(4096, 16)).astype(np.float32)
y = (np.sin(x[:, :4].sum(axis=1)) + 0.1 * rng.normal(size=4096)).astype(np.float32)[:, None]
w1 = (rng.normal(size=(16, args.width)) / 4).astype(np.float32)
w2 = (rng.normal(size=(args.width, 1)) / 8).astype(np.float32)
print(f"mlp 16-{args.width}-1, lr {args.lr}, {args.steps} steps, batch 128", flush=True)
with mldiag.init(configs=vars(args), log_system_metrics=False) as run:
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        time.sleep(0.02)  # the input pipeline
        batch = rng.integers(0, len(x), 128)
        hidden = np.tanh(x[batch] @ w1)
        error = hidden @ w2 - y[batch]
        loss = float(np.mean(error**2))
        grad_out = 2 * error / 128
        grad_w1 = x[batch].T @ ((grad_out @ w2.T) * (1 - hidden**2))
        lr = args.lr * min(1.0, step / 30) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        w2 -= lr * hidden.T @ grad_out
        w1 -= lr * grad_w1
        run.log({"loss": loss, "learning_rate": lr,
                 "step_time": time.perf_counter() - started}, step=step)
        if step % 25 == 0:
            print(f"step {step:4d}/{args.steps}  loss {loss:.4f}  lr {lr:.4f}", flush=True)
model_dir = os.environ["AIP_MODEL_DIR"]
os.makedirs(model_dir, exist_ok=True)
np.savez(os.path.join(model_dir, "weights.npz"), w1=w1, w2=w2)
print(f"saved the weights to {model_dir}", flush=True)
"""

# A trial: the same MLP for 60 steps at the study's learning rate and width, its loss reported
# in the cloudml-hypertune file format (JSON Lines, sorted keys, values as strings, the whole
# file rewritten per report) every 10 steps, and logged to the trial's run through the SDK.
TRIAL = r"""
import json, os, sys, time
import numpy as np
import mldiag

args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
lr, width = float(args["lr"]), int(float(args["width"]))
rng = np.random.default_rng(7)
x = rng.normal(size=(2048, 16)).astype(np.float32)
y = (np.sin(x[:, :4].sum(axis=1)) + 0.1 * rng.normal(size=2048)).astype(np.float32)[:, None]
w1 = (rng.normal(size=(16, width)) / 4).astype(np.float32)
w2 = (rng.normal(size=(width, 1)) / 8).astype(np.float32)
path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
os.makedirs(os.path.dirname(path), exist_ok=True)
lines = []
with mldiag.init(log_system_metrics=False) as run:
    for step in range(1, 61):
        time.sleep(0.02)
        batch = rng.integers(0, len(x), 128)
        hidden = np.tanh(x[batch] @ w1)
        error = hidden @ w2 - y[batch]
        loss = float(np.mean(error**2))
        grad_out = 2 * error / 128
        grad_w1 = x[batch].T @ ((grad_out @ w2.T) * (1 - hidden**2))
        w2 -= lr * hidden.T @ grad_out
        w1 -= lr * grad_w1
        run.log({"loss": loss}, step=step)
        if step % 10 == 0:
            lines.append(json.dumps({"global_step": str(step), "loss": repr(loss),
                                     "checkpoint_path": "", "timestamp": time.time(),
                                     "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "0")},
                                    sort_keys=True))
            with open(path, "w") as out:
                out.write("\n".join(lines) + "\n")
print(f"lr {lr:.4f} width {width}: loss {loss:.4f}", flush=True)
"""


def write_scripts(folder: Path) -> tuple[Path, Path, Path]:
    """The training, trial and profiled programs, in ``folder``."""
    scripts = folder / "train_mlp.py", folder / "trial_mlp.py", folder / "train_jax.py"
    for path, text in zip(scripts, (TRAIN, TRIAL, PROFILED), strict=True):
        path.write_text(text)
    return scripts


def _pool(command: list[str], args: list[str], machine: str = "e2-standard-4") -> dict[str, Any]:
    return {
        "machineSpec": {"machineType": machine},
        "replicaCount": "1",
        "containerSpec": {"imageUri": "python", "command": command, "args": args},
    }


def start_pipeline(
    http: httpx.Client, script: Path, name: str, lr: float, parent_model: str | None
) -> str:
    """A training pipeline running ``script`` as a custom job, importing its model as a new
    model or as the next version of ``parent_model``; its resource name."""
    body: dict[str, Any] = {
        "displayName": name,
        "trainingTaskDefinition": CUSTOM_TASK,
        "trainingTaskInputs": {
            "workerPoolSpecs": [_pool(["python", str(script)], ["--lr", str(lr), "--width", "64"])],
            "baseOutputDirectory": {"outputUriPrefix": f"{BUCKET}/{name}"},
            "experiment": "mlp-sine",  # the job's run joins the SDK runs' run set
        },
        "modelToUpload": {
            "displayName": "mlp-sine",
            "description": "A 16-64-1 tanh MLP fitted to sin(x1+x2+x3+x4) by minibatch SGD.",
            "containerSpec": {"imageUri": "serving:1"},
            "versionAliases": ["default"],  # as the SDK sends it: the new version is default
        },
    }
    if parent_model:
        body["parentModel"] = parent_model
    else:
        body["modelId"] = "mlp-sine"
    answer = http.post(f"{PARENT}/trainingPipelines", json=body)
    answer.raise_for_status()
    pipeline: str = answer.json()["name"]
    return pipeline


def backing_job(http: httpx.Client, pipeline: str, timeout: float = 60) -> str:
    """The id of the custom job a pipeline created."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metadata = http.get(f"/v1/{pipeline}").json().get("trainingTaskMetadata") or {}
        if job := metadata.get("backingCustomJob"):
            return str(job).rsplit("/", 1)[-1]
        time.sleep(0.3)
    raise RuntimeError(f"{pipeline} made no job within {timeout} s")


def wait_ended(http: httpx.Client, name: str, timeout: float = 240) -> dict[str, Any]:
    """A job or pipeline once it has ended; it must have succeeded."""
    deadline = time.monotonic() + timeout
    found: dict[str, Any] = {}
    while time.monotonic() < deadline:
        found = http.get(f"/v1/{name}").json()
        if found.get("state") in TERMINAL_JOB | TERMINAL_PIPELINE:
            if not found["state"].endswith("SUCCEEDED"):
                raise RuntimeError(f"{name} ended {found['state']}: {found.get('error')}")
            return found
        time.sleep(0.5)
    raise RuntimeError(f"{name} did not end within {timeout} s ({found.get('state')})")


def start_study(
    http: httpx.Client, script: Path, name: str, trials: int, *, stopping: bool = False
) -> str:
    """A study of ``trials`` trials, 2 at a time, over learning rate (log scale) and width,
    with median stopping or without; its resource name."""
    body: dict[str, Any] = {
        "displayName": name,
        "studySpec": {
            "metrics": [{"metricId": "loss", "goal": "MINIMIZE"}],
            "parameters": [
                {
                    "parameterId": "lr",
                    "doubleValueSpec": {"minValue": 0.003, "maxValue": 0.3},
                    "scaleType": "UNIT_LOG_SCALE",
                },
                {
                    "parameterId": "width",
                    "discreteValueSpec": {"values": [16, 32, 64, 128]},
                },
            ],
            "algorithm": "RANDOM_SEARCH",
            "measurementSelectionType": "LAST_MEASUREMENT",
        },
        "maxTrialCount": trials,
        "parallelTrialCount": 2,
        "maxFailedTrialCount": 2,
        "trialJobSpec": {
            "workerPoolSpecs": [_pool(["python", str(script)], [], machine="local-small")]
        },
    }
    if stopping:
        body["studySpec"]["medianAutomatedStoppingSpec"] = {}
    answer = http.post(f"{PARENT}/hyperparameterTuningJobs", json=body)
    answer.raise_for_status()
    study: str = answer.json()["name"]
    return study


def alias(http: httpx.Client, model: str, version: str, aliases: list[str]) -> None:
    """Give ``version`` of ``model`` (its resource name) the ``aliases``."""
    answer = http.post(
        f"/v1/{model}@{version}:mergeVersionAliases", json={"versionAliases": aliases}
    )
    answer.raise_for_status()


# A JAX job serving XProf's profiler (``profiler_port=0``: a free port, registered as the
# run's profiler target) so that a capture can be taken while it trains; it stops once the
# file named by its argument appears (or after three minutes, whatever happens to the tool).
PROFILED = r"""
import sys, time
from pathlib import Path
import jax, jax.numpy as jnp
import mldiag

stop = Path(sys.argv[1])
key = jax.random.PRNGKey(7)
x = jax.random.normal(key, (4096, 16))
y = jnp.sin(x[:, :4].sum(axis=1, keepdims=True))
params = (jax.random.normal(key, (16, 256)) / 4, jax.random.normal(key, (256, 1)) / 16)

def loss_fn(params, xb, yb):
    hidden = jnp.tanh(xb @ params[0])
    return jnp.mean((hidden @ params[1] - yb) ** 2)

@jax.jit
def train_step(params, xb, yb):
    loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
    return tuple(p - 0.1 * g for p, g in zip(params, grads)), loss

with mldiag.init(profiler_port=0, log_system_metrics=False) as run:
    deadline, step = time.monotonic() + 180, 0
    while not stop.exists() and time.monotonic() < deadline:
        step += 1
        started = time.perf_counter()
        batch = (step * 128) % 4096
        params, loss = train_step(params, x[batch:batch + 128], y[batch:batch + 128])
        loss = float(loss)
        time.sleep(0.01)  # the input pipeline
        run.log({"loss": loss, "step_time": time.perf_counter() - started}, step=step)
        if step % 200 == 0:
            print(f"step {step:5d}  loss {loss:.4f}", flush=True)
"""


def start_profiled_job(http: httpx.Client, script: Path, stop: Path) -> str:
    """A custom job running the JAX program until ``stop`` exists; its id."""
    body = {
        "displayName": "mlp-sine jax, profiler on",
        "jobSpec": {
            "workerPoolSpecs": [_pool(["python", str(script)], [str(stop)], "local-small")],
            "experiment": "mlp-sine",
        },
    }
    answer = http.post(f"{PARENT}/customJobs", json=body)
    answer.raise_for_status()
    return str(answer.json()["name"]).rsplit("/", 1)[-1]

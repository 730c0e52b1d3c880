"""The two monitored runs: numpy training loops recorded through the real SDK.

Each is a small MLP fitted by minibatch SGD on a synthetic regression, 300 steps with its
loss, learning rate, gradient norm and step time, a checkpoint saved every 100 steps, and its
configs. The baseline warms up and decays its learning rate; the other's keeps growing until
the weights overflow and the loss becomes NaN (a real NaN, from the arithmetic), which the
event detector turns into an event and the analyzers explain. A short sleep per step stands
in for the input pipeline, so the step times and the time axis read like a job's.
"""

import math
import time
from pathlib import Path
from typing import Any

import numpy as np

import mldiag

STEPS = 300
CHECKPOINT_EVERY = 100
INPUT_WAIT_S = 0.02  # stands in for the input pipeline: a job's steps take time


def _train(run: mldiag.Run, peak_lr: float, growth: float, seed: int, folder: Path) -> int:
    """A two-layer MLP (tanh) fitted by minibatch SGD; the step the loss stopped being finite
    at, or 0. The learning rate warms up over 30 steps, then decays by cosine (``growth`` 0)
    or grows by ``growth`` a step."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4096, 16)).astype(np.float32)
    y = (np.sin(x[:, :4].sum(axis=1)) + 0.1 * rng.normal(size=4096)).astype(np.float32)[:, None]
    w1 = (rng.normal(size=(16, 64)) / 4).astype(np.float32)
    w2 = (rng.normal(size=(64, 1)) / 8).astype(np.float32)
    bad = 0
    for step in range(1, STEPS + 1):
        started = time.perf_counter()
        time.sleep(INPUT_WAIT_S)
        batch = rng.integers(0, len(x), 128)
        xb, yb = x[batch], y[batch]
        warm = min(1.0, step / 30)
        decay = 0.5 * (1 + math.cos(math.pi * step / STEPS)) if growth == 0 else growth**step
        lr = peak_lr * warm * decay
        with np.errstate(all="ignore"):  # the unstable run overflows: that is the point
            hidden = np.tanh(xb @ w1)
            error = hidden @ w2 - yb
            loss = float(np.mean(error**2))
            grad_out = 2 * error / len(xb)
            grad_w2 = hidden.T @ grad_out
            grad_w1 = xb.T @ ((grad_out @ w2.T) * (1 - hidden**2))
            grad_norm = float(np.sqrt((grad_w1**2).sum() + (grad_w2**2).sum()))
            w1 -= lr * grad_w1
            w2 -= lr * grad_w2
        step_time = time.perf_counter() - started
        run.log(
            {"loss": loss, "learning_rate": lr, "gradient_norm": grad_norm, "step_time": step_time},
            step=step,
        )
        if not math.isfinite(loss):
            bad = bad or step
            if step >= bad + 5:  # a few steps of NaN, as a job logs before it is stopped
                return bad
        if step % CHECKPOINT_EVERY == 0:
            with run.checkpoint():
                np.savez(folder / f"ckpt-{step}.npz", w1=w1, w2=w2)
    return bad


def record_runs(api: str, token: str, tmp: Path) -> tuple[str, str]:
    """The two runs through the SDK; their ids (baseline, unstable)."""
    common: dict[str, Any] = {
        "api_url": api,
        "ingestion_url": api,  # the edge routes ingestion
        "token": token,
        "spool_dir": tmp / "spool",
        "run_set": "mlp-sine",
        "labels": {"team": "research"},
        "log_system_metrics": False,  # keep the pictures about the model
    }
    configs = {"model": "mlp-16-64-1", "optimizer": "sgd", "batch_size": 128, "steps": STEPS}
    with mldiag.init(
        name="mlp baseline lr=0.3 cosine",
        configs={**configs, "peak_lr": 0.3, "schedule": "warmup+cosine"},
        **common,
    ) as baseline:
        _train(baseline, peak_lr=0.3, growth=0, seed=1, folder=tmp)
    unstable = mldiag.init(
        name="mlp lr grows 0.8%/step",
        configs={**configs, "peak_lr": 0.3, "schedule": "warmup+exponential(1.008)"},
        **common,
    )
    bad_step = _train(unstable, peak_lr=0.3, growth=1.008, seed=1, folder=tmp)
    if bad_step == 0:
        raise RuntimeError("the unstable run never went NaN: raise its growth")
    unstable.finish("FAILED", error=f"loss is NaN at step {bad_step}")
    return baseline.run_id, unstable.run_id

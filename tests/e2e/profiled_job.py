"""A small JAX job that the profiling tests profile, one process per simulated host.

Run as ``python profiled_job.py MODE`` with ``MLDIAG_RUN_ID``, ``MLDIAG_HOST``,
``MLDIAG_PROCESS_INDEX`` and the platform's URLs set. Modes:

- ``programmatic``: trace a few steps with ``mldiag.xprof()`` (session ``$SESSION_ID``), exit;
- ``serve``: step with the profiler server on (a free port, registered as the run's target)
  until the file ``$STOP_FILE`` appears;
- ``serve_and_trace``: the same, with a programmatic trace held open from the start until
  ``$STOP_FILE`` appears (a capture meanwhile must be refused).
"""

import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import mldiag


def _step_fn() -> "jax.stages.Wrapped":
    return jax.jit(lambda x: jnp.tanh(x @ x.T).sum())


def _steps_until(run: mldiag.Run, stop: Path, limit: float = 120.0) -> None:
    step_fn, x = _step_fn(), jnp.ones((128, 128))
    deadline = time.monotonic() + limit  # never outlive a test that died
    step = 0
    while not stop.exists() and time.monotonic() < deadline:
        step += 1
        started = time.perf_counter()
        step_fn(x).block_until_ready()
        time.sleep(0.01)
        run.log({"step_time": time.perf_counter() - started}, step=step)


def main(mode: str) -> None:
    stop = Path(os.environ.get("STOP_FILE", "/nonexistent"))
    serving = mode in ("serve", "serve_and_trace")
    with mldiag.init(name=mode, profiler_port=0 if serving else None) as run:
        if mode == "programmatic":
            step_fn, x = _step_fn(), jnp.ones((128, 128))
            step_fn(x).block_until_ready()  # compile outside the trace
            with mldiag.xprof(session_id=os.environ["SESSION_ID"]):
                for _ in range(20):
                    step_fn(x).block_until_ready()
        elif mode == "serve":
            _steps_until(run, stop)
        elif mode == "serve_and_trace":
            with mldiag.xprof(session_id=os.environ["SESSION_ID"]):
                _steps_until(run, stop)
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1])

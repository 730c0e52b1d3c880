"""A tiny JAX workload with a profiler server, for the capture tests.

``python profiled_workload.py PORT CONTROL_DIR`` starts ``jax.profiler.start_server(PORT)``,
writes ``CONTROL_DIR/ready`` and runs a small jitted loop until killed (or orphaned). While the file
``CONTROL_DIR/trace`` exists it holds a programmatic trace (``jax.profiler.start_trace``) open,
the way a workload's own ``mldiag.xprof()`` would, and says so with ``CONTROL_DIR/tracing``.
"""

import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp


@jax.jit
def _step(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x.T) * 0.5 + x * 0.5


def main() -> None:
    port, control = int(sys.argv[1]), Path(sys.argv[2])
    server = jax.profiler.start_server(port)  # kept referenced: the port lives with it
    x = jnp.ones((64, 64))
    _step(x).block_until_ready()  # compile before saying ready
    (control / "ready").write_text(str(port))
    tracing = False
    logdir = str(control / "programmatic")
    parent = os.getppid()
    # Ends with the test that started it, however that test ends.
    while server is not None and os.getppid() == parent:
        wanted = (control / "trace").exists()
        if wanted and not tracing:
            jax.profiler.start_trace(logdir)
            tracing = True
            (control / "tracing").write_text("1")
        elif tracing and not wanted:
            jax.profiler.stop_trace()
            tracing = False
            (control / "tracing").unlink()
        # Names each workload's steps in its xplane: a test can tell whose file is whose.
        with jax.profiler.TraceAnnotation(f"workload-{port}"):
            x = _step(x)
            x.block_until_ready()
        time.sleep(0.005)  # leave the shared CPUs to the other side of the test


if __name__ == "__main__":
    main()

"""Writes a real xplane: ``python jax_trace.py LOGDIR SESSION SECONDS``.

A small jitted loop with JAX's python tracer on, traced for ``SECONDS`` into
``LOGDIR/plugins/profile/SESSION/<hostname>.xplane.pb`` (the layout JAX always writes).
"""

import sys
import time

import jax
import jax.numpy as jnp


@jax.jit
def _step(x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ x.T) * 0.5 + x * 0.5


def _python_work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i % 7
    return total


def main() -> None:
    logdir, session, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    x = jnp.ones((64, 64))
    _step(x).block_until_ready()  # compile outside the trace
    options = jax.profiler.ProfileOptions()
    options.session_id = session
    options.python_tracer_level = 1
    jax.profiler.start_trace(logdir, profiler_options=options)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        x = _step(x)
        x.block_until_ready()
        _python_work(200)
    jax.profiler.stop_trace()


if __name__ == "__main__":
    main()

"""Small synthetic workloads that cause one workload event each, or none (quiet ones).

Run as ``python workload.py SCENARIO`` with ``MLDIAG_RUN_ID``, ``MLDIAG_HOST`` and
``MLDIAG_PROCESS_INDEX`` set: one process per simulated host, all on the same run, talking to
the platform through the real SDK. JAX (CPU) does the work where the event is about what JAX
does (numerics, recompilation); elsewhere a sleep stands in for a step, so the scenarios stay
fast on two cores.
"""

import os
import sys
import time
from collections.abc import Callable

import mldiag

STEPS = 60


def _host() -> int:
    return int(os.environ.get("MLDIAG_PROCESS_INDEX", "0"))


def _steps(
    run: mldiag.Run,
    seconds: Callable[[int], float],
    steps: int = STEPS,
    extra: Callable[[int], dict[str, float]] | None = None,
) -> None:
    """Sleep-steps of ``seconds(step)``, logging step_time (and ``extra``) at each."""
    for step in range(1, steps + 1):
        started = time.perf_counter()
        time.sleep(seconds(step))
        run.log(
            {"step_time": time.perf_counter() - started, **(extra(step) if extra else {})},
            step=step,
        )


def quiet(run: mldiag.Run) -> None:
    """Healthy steps with jitter, a checkpoint within budget, a prefetched input pipeline
    (taking the next batch costs next to nothing)."""
    batches = iter(range(STEPS + 1))
    for step in range(1, STEPS + 1):
        started = time.perf_counter()
        with run.data_wait():
            next(batches)
        time.sleep(0.04 + 0.004 * ((step * 7 + _host()) % 5))
        if step % 30 == 0:
            with run.checkpoint():
                time.sleep(0.02)
        run.log({"step_time": time.perf_counter() - started, "loss": 2.0 / step}, step=step)


def quiet_jax(run: mldiag.Run) -> None:
    """A real JAX regression fit: a warm-up compile, then steady steps and a falling loss."""
    import jax  # noqa: PLC0415  # only this scenario needs it
    import jax.numpy as jnp  # noqa: PLC0415

    run.watch_jax()
    key = jax.random.PRNGKey(_host())
    x = jax.random.normal(key, (256, 16))
    y = x @ jnp.arange(16.0)
    w = jnp.zeros(16)

    @jax.jit
    def update(w: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.05 * grad, loss

    for step in range(1, STEPS + 1):
        started = time.perf_counter()
        w, loss = update(w)
        time.sleep(0.02)
        run.log({"step_time": time.perf_counter() - started, "loss": float(loss)}, step=step)


def nan_loss(run: mldiag.Run) -> None:
    """JAX with a learning rate that diverges: the loss overflows to Inf, then NaN."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    x = jnp.linspace(-1.0, 1.0, 64)
    w = jnp.float32(1.0)

    @jax.jit
    def update(w: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((w * x) ** 4))(w)
        return w - 50.0 * grad, loss

    for step in range(1, 40):
        w, loss = update(w)
        run.log({"loss": float(loss), "step_time": 0.01}, step=step)
        time.sleep(0.01)


def recompilation(run: mldiag.Run) -> None:
    """A jitted function called with a new shape every step after warm-up."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415

    run.watch_jax()
    f = jax.jit(lambda v: jnp.tanh(v).sum())
    for step in range(1, 25):
        started = time.perf_counter()
        size = 8 if step <= 5 else 8 + step  # warm-up: one shape; after it: a new one each step
        f(jnp.ones(size)).block_until_ready()
        run.log({"step_time": time.perf_counter() - started}, step=step)


def straggler(run: mldiag.Run) -> None:
    """Host 2 of 3 becomes 80% slower after 2.5 s, for the rest of the run's 20 s: a
    straggler must last 10 s (the default materiality) while its peers still run."""
    slow = _host() == 2
    begun = time.monotonic()
    step = 0
    while time.monotonic() - begun < 20:
        step += 1
        started = time.perf_counter()
        late = time.monotonic() - begun > 2.5
        time.sleep(0.05 * (1.8 if slow and late else 1.0))
        run.log({"step_time": time.perf_counter() - started}, step=step)


def slowdown(run: mldiag.Run) -> None:
    """Every host's steps take three times as long after step 30 (after a few seconds of
    initialisation, while the other scenarios' start-up is over), for about 15 s: longer
    than a slowdown must last to be an event (10 s by default)."""
    time.sleep(4)
    _steps(run, lambda step: 0.03 * (3.0 if step > 30 else 1.0), steps=200)


def hang(run: mldiag.Run) -> None:
    """Steps, then the process blocks forever (still heart-beating) until killed."""
    _steps(run, lambda _: 0.02, steps=20)
    time.sleep(3600)


def crash(run: mldiag.Run) -> None:
    """An uncaught exception in the training loop."""
    _steps(run, lambda _: 0.02, steps=10)
    raise ValueError("shapes (32, 128) and (64, 128) are incompatible")


def accelerator_oom(run: mldiag.Run) -> None:
    """Accelerator memory climbs to 99% (as the system sampler would report it), then the
    allocation fails the way XLA reports it."""
    _steps(run, lambda _: 0.02, steps=12, extra=lambda step: {"hbm_utilization": 60.0 + 3.5 * step})
    raise MemoryError(
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8.00GiB on device 0"
    )


def host_memory(run: mldiag.Run) -> None:
    """Host memory in use grows past 90% (a leaking input pipeline)."""
    _steps(
        run,
        lambda _: 0.02,
        steps=20,
        extra=lambda step: {"host_memory_utilization": 50.0 + 2.5 * step},
    )


def input_stall(run: mldiag.Run) -> None:
    """Each step waits on input for about 60% of its time, for about 15 s (a stall must
    last 10 s to be an event by default)."""
    for step in range(1, 300):
        started = time.perf_counter()
        with run.data_wait():
            time.sleep(0.03)
        time.sleep(0.02)
        run.log({"step_time": time.perf_counter() - started}, step=step)


def checkpoint_stall(run: mldiag.Run) -> None:
    """A blocking checkpoint every 10 steps that takes as long as the 10 steps."""
    for step in range(1, 31):
        started = time.perf_counter()
        time.sleep(0.03)
        if step % 10 == 0:
            with run.checkpoint():
                time.sleep(0.3)
        run.log({"step_time": time.perf_counter() - started}, step=step)


def preempted(run: mldiag.Run) -> None:
    """The scheduler announces a preemption, then the job is terminated (SIGTERM)."""
    _steps(run, lambda _: 0.02, steps=15)
    run.preemption_notice("spot capacity reclaimed")
    os.kill(os.getpid(), 15)
    time.sleep(5)


def restart(run: mldiag.Run) -> None:
    """Resumed from the checkpoint at step 10 after reaching step 20 (its first life ran in
    ``restart_first_life``): steps 11..30 recorded again."""
    for step in range(11, 31):
        time.sleep(0.02)
        run.log({"step_time": 0.02}, step=step)


def restart_first_life(run: mldiag.Run) -> None:
    """The first life of ``restart``: 20 steps, then the process dies without a word."""
    _steps(run, lambda _: 0.02, steps=20)
    run.flush(5)
    os._exit(1)


def config_drift(run: mldiag.Run) -> None:
    """Two hosts with different XLA flags (the launcher set them per host), long enough for
    a few heartbeats to carry their fingerprints."""
    _steps(run, lambda _: 0.05, steps=60)


def cpu_contention(run: mldiag.Run) -> None:
    """A steady CPU-bound numpy regression fit on one core (about 40 ms a step, ~50 s); the
    harness starts a CPU burner per core during it (the scenario's ``load``), so the steps
    slow down while others take the CPU. The host is sampled every second (its env)."""
    import numpy as np  # noqa: PLC0415  # only this scenario needs it
    import numpy.typing as npt  # noqa: PLC0415

    rng = np.random.default_rng(_host())
    x = rng.standard_normal((2048, 64))
    # Noisy targets: the loss settles at the noise's variance, steady (no vanishing loss).
    y = x @ rng.standard_normal(64) + rng.standard_normal(2048)
    w = np.zeros(64)

    def descend(w: npt.NDArray[np.float64], passes: int) -> tuple[npt.NDArray[np.float64], float]:
        for _ in range(passes):
            error = x @ w - y
            w = w - 1e-4 * (x.T @ error)
        return w, float(np.mean(error**2))

    # How many passes a 40 ms step holds on this machine, measured before any load starts.
    started = time.perf_counter()
    w, _ = descend(w, 20)
    passes = max(1, round(0.04 / ((time.perf_counter() - started) / 20)))
    begun = time.monotonic()
    step = 0
    while time.monotonic() - begun < 50:
        step += 1
        started = time.perf_counter()
        w, loss = descend(w, passes)
        run.log({"step_time": time.perf_counter() - started, "loss": loss}, step=step)


SCENARIOS: dict[str, Callable[[mldiag.Run], None]] = {
    f.__name__: f
    for f in (
        quiet,
        quiet_jax,
        nan_loss,
        recompilation,
        straggler,
        slowdown,
        hang,
        crash,
        accelerator_oom,
        host_memory,
        input_stall,
        checkpoint_stall,
        preempted,
        restart,
        restart_first_life,
        config_drift,
        cpu_contention,
    )
}


def main() -> None:
    """Run one scenario as this process's part of the run."""
    scenario = SCENARIOS[sys.argv[1]]
    # The host is sampled only where a scenario asks for it (it sets the interval).
    sampled = bool(os.environ.get("MLDIAG_SYSTEM_METRICS_INTERVAL"))
    with mldiag.init(name=sys.argv[1], log_system_metrics=sampled) as run:
        scenario(run)


if __name__ == "__main__":
    main()

"""A JAX training loop recorded with the mldiag SDK.

Shows ``mldiag.init`` with a run set and configs, ``run.log`` of the loss and the step time
every step, and ``run.checkpoint()`` timing a (here, local ``.npz``) checkpoint save. The
model is a linear regression on synthetic data, so it runs in seconds on a CPU.

Run it against a platform (``mldiag up``, or any API URL and token)::

    export MLDIAG_API_URL=http://127.0.0.1:8080 MLDIAG_TOKEN=...
    python examples/jax_training.py --steps 300

It prints the run id; open the run in the console, or ``mldiag metrics list RUN``. Set
``MLDIAG_RUN_ID`` to choose the id (every host of one job passes the same).
"""

import argparse
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import mldiag

FEATURES = 8


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    """Mean squared error of a linear model."""
    prediction = x @ params["w"] + params["b"]
    return jnp.mean((prediction - y) ** 2)


@jax.jit
def train_step(
    params: dict[str, jax.Array], x: jax.Array, y: jax.Array, learning_rate: float
) -> tuple[dict[str, jax.Array], jax.Array]:
    """One step of plain gradient descent; the new parameters and the loss before it."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updated = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads)
    return updated, loss


def main() -> None:
    """Train for ``--steps`` steps, logging every step and checkpointing every 50."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    args = parser.parse_args()

    key_x, key_w = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(key_x, (1024, FEATURES))
    y = x @ jax.random.normal(key_w, (FEATURES,)) + 0.5
    params = {"w": jnp.zeros(FEATURES), "b": jnp.zeros(())}
    configs = {"learning_rate": args.learning_rate, "features": FEATURES, "steps": args.steps}
    checkpoints = Path(tempfile.mkdtemp(prefix="jax-example-"))

    # Leaving the block marks the run COMPLETED (FAILED if the loop raises).
    with mldiag.init(name="jax-linear-regression", run_set="examples", configs=configs) as run:
        print(f"run {run.run_id}", flush=True)  # noqa: T201 (the example's output)
        for step in range(args.steps):
            started = time.perf_counter()
            params, loss = train_step(params, x, y, args.learning_rate)
            loss.block_until_ready()  # so step_time is the step's, not the dispatch's
            # The loss stays a JAX array: the SDK converts it on its own thread.
            run.log({"loss": loss, "step_time": time.perf_counter() - started}, step=step)
            if (step + 1) % args.checkpoint_every == 0:
                with run.checkpoint():  # recorded as checkpoint_time at this step
                    path = checkpoints / f"step-{step + 1}.npz"
                    np.savez(path, w=np.asarray(params["w"]), b=np.asarray(params["b"]))
        print(f"final loss {float(loss):.6f}", flush=True)  # noqa: T201


if __name__ == "__main__":
    main()

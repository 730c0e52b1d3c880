"""Real Flax NNX and bare JAX + Optax training loops on the CPU, recorded on the fake platform."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import mldiag
from mldiag.integrations import flax as mldiag_flax
from sdk.fake_platform import FakePlatform

STEPS = 30


def series(platform: FakePlatform, name: str) -> dict[int, float]:
    return {step: value for _, step, value in platform.received.points(name)}


def batches(count: int) -> list[tuple[jax.Array, jax.Array]]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        x = rng.normal(size=(16, 4)).astype("float32")
        out.append((jnp.asarray(x), jnp.asarray(x.sum(axis=1, keepdims=True))))
    return out


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(4, 8, rngs=rngs)
        self.out = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(x)))


@nnx.jit
def nnx_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(model: MLP) -> jax.Array:
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def test_an_nnx_loop_records_loss_rate_step_time_and_compiles(
    platform: FakePlatform, options: dict[str, Any]
) -> None:
    model = MLP(nnx.Rngs(0))
    schedule = optax.linear_schedule(0.05, 0.0, STEPS)
    optimizer = nnx.Optimizer(
        model, optax.inject_hyperparams(optax.adam)(learning_rate=schedule), wrt=nnx.Param
    )
    step = mldiag_flax.track(
        nnx_step, sync_every=10, name="nnx-mlp", configs={"lr": 0.05}, init_options=options
    )
    losses = [step(model, optimizer, x, y) for x, y in batches(STEPS)]
    run = step.run
    assert run is not None
    run.finish()

    (created,) = platform.received.creates
    assert created["displayName"] == "nnx-mlp"
    assert created["configs"]["userConfigs"] == {"lr": 0.05}
    loss = series(platform, "loss")
    assert sorted(loss) == list(range(STEPS))
    assert [loss[i] for i in range(STEPS)] == pytest.approx([float(v) for v in losses])
    assert loss[STEPS - 1] < loss[0]  # it trained
    # The rate each update applied (inject_hyperparams keeps it in the state): schedule(i).
    rate = series(platform, "learning_rate")
    assert [rate[i] for i in range(STEPS)] == pytest.approx(
        [float(schedule(i)) for i in range(STEPS)], abs=1e-6
    )
    # Timed on the first call, then once per window of 10 calls.
    assert sorted(series(platform, "step_time")) == [0, 10, 20]
    assert all(seconds > 0 for seconds in series(platform, "step_time").values())
    assert series(platform, "compile_time"), "the jitted step's compilation is recorded"


def test_a_bare_jax_optax_step_records_grad_norm(
    platform: FakePlatform, options: dict[str, Any]
) -> None:
    tx = optax.sgd(0.1)
    params = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
    opt_state = tx.init(params)

    @jax.jit
    def train_step(
        params: dict[str, jax.Array], opt_state: optax.OptState, x: jax.Array, y: jax.Array
    ) -> tuple[dict[str, jax.Array], optax.OptState, dict[str, Any]]:
        def loss_fn(params: dict[str, jax.Array]) -> jax.Array:
            return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state, {"loss": loss, "grads": grads}

    run = mldiag.init(name="bare", **options)
    step = mldiag_flax.track(train_step, run, log_every=5, sync_every=1, learning_rate=0.1)
    norms = []
    for x, y in batches(20):
        grads = jax.grad(lambda p, x=x, y=y: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
        norms.append(float(optax.tree.norm(grads)))
        params, opt_state, _ = step(params, opt_state, x, y)
    run.finish()

    assert sorted(series(platform, "loss")) == [0, 5, 10, 15]
    norm = series(platform, "grad_norm")
    assert [norm[i] for i in (0, 5, 10, 15)] == pytest.approx([norms[i] for i in (0, 5, 10, 15)])
    assert set(series(platform, "learning_rate").values()) == {0.1}
    assert sorted(series(platform, "step_time")) == list(range(20))  # sync_every=1: each call
    assert "grads" not in {name for name, _, _ in platform.received.points()}


def test_a_scalar_result_is_the_loss_and_bad_arguments_are_refused(
    platform: FakePlatform, options: dict[str, Any]
) -> None:
    run = mldiag.init(name="scalar", **options)
    step = mldiag_flax.track(jnp.sum, run)
    step(jnp.ones(3))
    run.finish()
    assert series(platform, "loss") == {0: 3.0}
    with pytest.raises(ValueError, match="at least 1"):
        mldiag_flax.track(lambda x: x, run, sync_every=0)


def test_a_failing_metrics_picker_is_logged_once_and_the_loop_goes_on(
    platform: FakePlatform, options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    run = mldiag.init(name="picker", **options)
    step = mldiag_flax.track(jnp.sum, run, sync_every=1, metrics=lambda result: {**result})
    results = [step(jnp.ones(2)) for _ in range(3)]
    run.finish()
    assert [float(r) for r in results] == [2.0, 2.0, 2.0]
    assert sorted(series(platform, "step_time")) == [0, 1, 2]
    assert sum("mldiag.flax.metrics_failed" in r.message for r in caplog.records) == 1

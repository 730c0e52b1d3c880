"""A real Keras 3 ``fit`` (JAX backend, a tiny model, two epochs) recorded on the fake platform."""

from typing import Any

import keras
import numpy as np
import pytest

import mldiag
from mldiag.integrations.keras import MldiagCallback, model_configs
from sdk.fake_platform import FakePlatform

EPOCHS = 2
SAMPLES = 64
BATCH = 16
STEPS = EPOCHS * SAMPLES // BATCH  # 8 training batches in all


def tiny_model() -> keras.Model:
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)],
        name="tiny_regressor",
    )
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse", metrics=["mae"])
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(SAMPLES, 4)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def series(platform: FakePlatform, name: str) -> dict[int, float]:
    return {step: value for _, step, value in platform.received.points(name)}


def test_a_fit_records_steps_epochs_and_configs(
    platform: FakePlatform, options: dict[str, Any]
) -> None:
    x, y = data()
    model = tiny_model()
    callback = MldiagCallback(batch_size=BATCH, init_options=options)

    model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, validation_split=0.25, verbose=0,
              callbacks=[callback])  # fmt: skip

    assert callback.run is not None
    assert mldiag.current_run() is None or mldiag.current_run() is not callback.run
    (created,) = platform.received.creates
    assert created["displayName"] == "tiny_regressor"
    user = created["configs"]["userConfigs"]
    assert user["epochs"] == EPOCHS
    assert user["batch_size"] == BATCH
    assert user["optimizer"] == "Adam"
    assert user["optimizer_config"]["learning_rate"] == pytest.approx(0.01)
    assert user["parameters"] == 4 * 8 + 8 + 8 + 1
    steps_per_epoch = 48 // BATCH  # validation_split keeps 16 of the 64 samples apart
    assert user["steps_per_epoch"] == steps_per_epoch
    batches = range(EPOCHS * steps_per_epoch)
    for name in ("step_time", "loss", "mae", "learning_rate"):
        assert sorted(series(platform, name)) == list(batches), name
    assert all(0 < seconds < 30 for seconds in series(platform, "step_time").values())
    assert list(series(platform, "learning_rate").values()) == pytest.approx([0.01] * len(batches))
    epoch_ends = [steps_per_epoch - 1, 2 * steps_per_epoch - 1]
    for name in ("epoch", "epoch_loss", "epoch_mae", "val_loss", "val_mae"):
        assert sorted(series(platform, name)) == epoch_ends, name
    assert series(platform, "epoch") == {epoch_ends[0]: 0, epoch_ends[1]: 1}
    history = model.history.history
    assert series(platform, "val_loss")[epoch_ends[1]] == float(np.float32(history["val_loss"][1]))
    # The run ended with the fit because the callback started it.
    assert [body["runPhase"] for _, _, body in platform.received.patches][-1] == "COMPLETED"


def test_log_every_thins_batches_and_a_given_run_stays_open(
    platform: FakePlatform, options: dict[str, Any]
) -> None:
    x, y = data()
    model = tiny_model()
    run = mldiag.init(name="mine", **options)
    run.log({"warmup": 1.0})  # step 0: the fit's batches come after it
    model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, verbose=0,
              callbacks=[MldiagCallback(run, log_every=3)])  # fmt: skip
    run.finish()

    assert sorted(series(platform, "loss")) == [1 + step for step in range(STEPS) if step % 3 == 0]
    assert sorted(series(platform, "epoch")) == [4, 8]
    assert [body["runPhase"] for _, _, body in platform.received.patches] == ["COMPLETED"]


def test_model_configs_of_a_model_not_built() -> None:
    model = keras.Sequential([keras.layers.Dense(2)], name="later")
    assert model_configs(model, epochs=3) == {"model": "later", "epochs": 3}


def test_each_fit_gets_a_run_of_its_own(platform: FakePlatform, options: dict[str, Any]) -> None:
    x, y = data()
    model = tiny_model()
    callback = MldiagCallback(init_options=options)
    model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0, callbacks=[callback])
    first = callback.run
    model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0, callbacks=[callback])
    assert first is not None and callback.run is not None
    assert callback.run.run_id != first.run_id
    assert len(platform.received.creates) == 2
    assert [body["runPhase"] for _, _, body in platform.received.patches] == ["COMPLETED"] * 2

"""The Lightning callback driven through a ``fit`` by stand-ins shaped like Lightning 2's
objects (torch does not fit CI; docs/integrations.md has the manual check with a real
``Trainer``). The stand-ins hold exactly what the documented interface offers:
``trainer.global_step`` (optimizer steps), ``current_epoch``, ``max_epochs``,
``accumulate_grad_batches``, ``optimizers`` (``param_groups`` with ``lr``),
``callback_metrics`` (0-d tensors, read with ``.item()``), ``sanity_checking``; the hooks
are called in ``fit``'s order with ``outputs = {"loss": tensor}``."""

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

import mldiag
from mldiag.integrations.lightning import MldiagCallback
from sdk.fake_platform import FakePlatform

BATCHES = 4  # per epoch
ACCUMULATE = 2
EPOCHS = 2


@dataclass
class Tensor:
    """A 0-d tensor: Lightning hands these to callbacks."""

    value: float

    def item(self) -> float:
        return self.value


@dataclass
class Optimizer:
    param_groups: list[dict[str, Any]]


@dataclass
class Trainer:
    max_epochs: int = EPOCHS
    accumulate_grad_batches: int = ACCUMULATE
    global_step: int = 0
    current_epoch: int = 0
    sanity_checking: bool = False
    optimizers: list[Optimizer] = field(default_factory=list)
    callback_metrics: dict[str, Tensor] = field(default_factory=dict)


class TinyModule:
    hparams = {"hidden": 8, "lr": 0.1}  # noqa: RUF012  # read-only, like save_hyperparameters()


def series(platform: FakePlatform, name: str) -> dict[int, float]:
    return {step: value for _, step, value in platform.received.points(name)}


def fit(callback: MldiagCallback, trainer: Trainer) -> None:
    """What ``Trainer.fit`` does around its callbacks: a sanity check, then epochs of
    batches (one optimizer step per ``ACCUMULATE`` batches), each epoch validated."""
    module = TinyModule()
    trainer.sanity_checking = True
    trainer.callback_metrics = {"val_loss": Tensor(9.0)}
    callback.on_validation_end(trainer, module)
    trainer.sanity_checking = False
    callback.on_train_start(trainer, module)
    for epoch in range(EPOCHS):
        for batch_idx in range(BATCHES):
            callback.on_train_batch_start(trainer, module, None, batch_idx)
            time.sleep(0.005)
            if (batch_idx + 1) % ACCUMULATE == 0:
                trainer.global_step += 1
                trainer.optimizers[0].param_groups[0]["lr"] *= 0.5
            loss = Tensor(1.0 / (1 + trainer.global_step))
            callback.on_train_batch_end(trainer, module, {"loss": loss}, None, batch_idx)
        trainer.callback_metrics = {
            "train_acc": Tensor(0.5 + epoch / 10),
            "val_loss": Tensor(0.3 - epoch / 10),
        }
        callback.on_validation_end(trainer, module)
        callback.on_train_epoch_end(trainer, module)
        trainer.current_epoch += 1
    callback.on_train_end(trainer, module)


def test_a_fit_records_optimizer_steps_epochs_and_validation(
    platform: FakePlatform, options: dict[str, Any]
) -> None:
    trainer = Trainer(optimizers=[Optimizer([{"lr": 0.1}])])
    fit(MldiagCallback(init_options=options), trainer)

    (created,) = platform.received.creates
    assert created["displayName"] == "TinyModule"
    assert created["configs"]["userConfigs"] == {
        "hidden": 8,
        "lr": 0.1,
        "module": "TinyModule",
        "max_epochs": EPOCHS,
        "accumulate_grad_batches": ACCUMULATE,
        "optimizers": ["Optimizer"],
    }
    steps = list(range(1, EPOCHS * BATCHES // ACCUMULATE + 1))  # 1..4
    step_time = series(platform, "step_time")
    assert sorted(step_time) == steps
    assert all(seconds >= ACCUMULATE * 0.005 for seconds in step_time.values())
    assert series(platform, "loss") == {step: 1 / (1 + step) for step in steps}
    assert series(platform, "learning_rate") == {step: 0.1 * 0.5**step for step in steps}
    assert series(platform, "epoch") == {2: 0, 4: 1}
    assert series(platform, "train_acc") == {2: 0.5, 4: pytest.approx(0.6)}
    # The sanity check's 9.0 is not recorded.
    assert series(platform, "val_loss") == {2: 0.3, 4: pytest.approx(0.2)}
    assert [body["runPhase"] for _, _, body in platform.received.patches] == ["COMPLETED"]


def test_log_every_and_parameter_groups(platform: FakePlatform, options: dict[str, Any]) -> None:
    run = mldiag.init(name="pl", **options)
    trainer = Trainer(optimizers=[Optimizer([{"lr": 0.1}, {"lr": 0.01}])])
    fit(MldiagCallback(run, log_every=3), trainer)
    run.finish()

    assert sorted(series(platform, "step_time")) == [1, 4]
    assert sorted(series(platform, "learning_rate_1")) == [1, 4]
    assert "learning_rate" not in {name for name, _, _ in platform.received.points()}
    with pytest.raises(ValueError, match="at least 1"):
        MldiagCallback(log_every=0)

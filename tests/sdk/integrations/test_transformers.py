"""The Hugging Face callback, driven by transformers' own ``CallbackHandler`` with real
``TrainingArguments``, ``TrainerState`` and ``TrainerControl``, in the order ``Trainer``
calls the hooks (transformers' callback classes import without torch; a real ``Trainer``
needs torch, which does not fit CI: docs/integrations.md has that manual check)."""

import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import CallbackHandler

import mldiag
from mldiag.integrations.transformers import MldiagCallback
from sdk.fake_platform import FakePlatform

STEPS = 6
LOGGING_STEPS = 2


class TinyModel:
    """The model the handler hands to callbacks (only its class name is read)."""


def series(platform: FakePlatform, name: str) -> dict[int, float]:
    return {step: value for _, step, value in platform.received.points(name)}


def train(callback: MldiagCallback, tmp_path: Path) -> TrainingArguments:
    """What ``Trainer.train`` does around its callbacks, without torch."""
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"),
        learning_rate=5e-5,
        num_train_epochs=1,
        per_device_train_batch_size=8,
        logging_steps=LOGGING_STEPS,
        report_to="none",
    )
    handler = CallbackHandler([callback], TinyModel(), None, None, None)
    state, control = TrainerState(max_steps=STEPS), TrainerControl()
    control = handler.on_train_begin(args, state, control)
    for step in range(STEPS):
        control = handler.on_step_begin(args, state, control)
        time.sleep(0.01)  # the step's work
        state.global_step += 1
        state.epoch = (step + 1) / STEPS
        control = handler.on_step_end(args, state, control)
        if state.global_step % LOGGING_STEPS == 0:
            logs = {"loss": 1.0 / state.global_step, "grad_norm": 0.5, "learning_rate": 5e-5}
            control = handler.on_log(args, state, control, {**logs, "epoch": state.epoch})
    control = handler.on_log(args, state, control, {"eval_loss": 0.25, "epoch": 1.0})
    handler.on_train_end(args, state, control)
    return args


def test_a_training_records_step_times_logs_and_the_arguments(
    platform: FakePlatform, options: dict[str, Any], tmp_path: Path
) -> None:
    callback = MldiagCallback(init_options=options)
    assert isinstance(callback, TrainerCallback)
    train(callback, tmp_path)

    (created,) = platform.received.creates
    user = created["configs"]["userConfigs"]
    assert user["model"] == "TinyModel"
    assert user["learning_rate"] == 5e-5
    assert user["per_device_train_batch_size"] == 8
    assert created["displayName"] == "TinyModel"  # no run_name given
    step_time = series(platform, "step_time")
    assert sorted(step_time) == list(range(1, STEPS + 1))
    assert all(seconds >= 0.01 for seconds in step_time.values())
    assert series(platform, "loss") == {2: 0.5, 4: 0.25, 6: 1 / 6}
    assert sorted(series(platform, "grad_norm")) == [2, 4, 6]
    assert sorted(series(platform, "learning_rate")) == [2, 4, 6]
    assert series(platform, "eval_loss") == {6: 0.25}
    assert [body["runPhase"] for _, _, body in platform.received.patches] == ["COMPLETED"]


def test_a_given_run_is_left_open(
    platform: FakePlatform, options: dict[str, Any], tmp_path: Path
) -> None:
    run = mldiag.init(name="hf", **options)
    train(MldiagCallback(run), tmp_path)
    assert platform.received.patches == []
    run.finish()
    assert sorted(series(platform, "loss")) == [2, 4, 6]

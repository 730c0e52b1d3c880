"""The examples of docs/integrations.md, run as they are written against the fake platform.

Keras, Flax and JAX run in this process. Lightning and Hugging Face need torch, which does
not fit CI: they run in the interpreter named by ``MLDIAG_TORCH_PYTHON`` (the manual check
of docs/integrations.md) and are skipped without it; their syntax is checked always.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

from sdk.fake_platform import FakePlatform

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "integrations.md"
SNIPPET = re.compile(r"<!-- snippet: (\w+) -->\n```python\n(.*?)```", re.DOTALL)
TORCH_PYTHON = os.environ.get("MLDIAG_TORCH_PYTHON", "")


def snippets() -> dict[str, str]:
    return dict(SNIPPET.findall(DOC.read_text()))


def names(platform: FakePlatform) -> set[str]:
    return {name for name, _, _ in platform.received.points()}


def steps(platform: FakePlatform, name: str) -> list[int]:
    return sorted(step for _, step, _ in platform.received.points(name))


@pytest.fixture
def environment(
    platform: FakePlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """What the examples read: the platform's URL, a spool, no sampling threads."""
    env = {
        "MLDIAG_API_URL": platform.url,
        "MLDIAG_INGESTION_URL": platform.url,
        "MLDIAG_TOKEN": "",
        "MLDIAG_HOME": str(tmp_path / "home"),
        "MLDIAG_SPOOL_DIR": str(tmp_path / "spool"),
        "MLDIAG_HEARTBEAT_INTERVAL": "0",
        "MLDIAG_SYSTEM_METRICS_INTERVAL": "0",
        "MLDIAG_CONTENTION_INTERVAL": "0",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    return env


def run_here(name: str) -> None:
    exec(compile(snippets()[name], f"{DOC}:{name}", "exec"), {"__name__": f"doc_{name}"})  # noqa: S102  # the doc's own example


def run_with_torch(name: str, env: dict[str, str], tmp_path: Path) -> None:
    if not TORCH_PYTHON:
        pytest.skip("needs torch: set MLDIAG_TORCH_PYTHON (docs/integrations.md, manual check)")
    script = tmp_path / f"{name}_example.py"
    script.write_text(snippets()[name])
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT / "libs" / "sdk" / "src")}
    subprocess.run(
        [TORCH_PYTHON, str(script)], env=child_env, cwd=tmp_path, check=True, timeout=300
    )


def test_every_example_is_found_and_compiles() -> None:
    found = snippets()
    assert set(found) == {"keras", "flax", "jax", "lightning", "transformers"}
    for name, code in found.items():
        compile(code, name, "exec")


@pytest.mark.usefixtures("environment")
def test_the_keras_example(platform: FakePlatform) -> None:
    run_here("keras")
    (created,) = platform.received.creates
    assert created["displayName"] == "regressor"
    assert created["configs"]["userConfigs"]["batch_size"] == 32
    assert {"step_time", "loss", "mae", "learning_rate", "epoch_loss", "val_mae"} <= names(platform)
    assert steps(platform, "loss") == list(range(12))  # 2 epochs of 192 / 32 batches
    assert steps(platform, "val_loss") == [5, 11]


@pytest.mark.usefixtures("environment")
def test_the_flax_example(platform: FakePlatform) -> None:
    run_here("flax")
    (created,) = platform.received.creates
    assert created["configs"]["userConfigs"] == {"peak_lr": 0.05, "steps": 100}
    assert {"loss", "grad_norm", "learning_rate", "step_time", "compile_time"} <= names(platform)
    assert steps(platform, "loss") == list(range(100))
    assert steps(platform, "step_time") == list(range(0, 100, 10))


@pytest.mark.usefixtures("environment")
def test_the_jax_example(platform: FakePlatform) -> None:
    run_here("jax")
    assert steps(platform, "grad_norm") == list(range(0, 50, 5))
    rates = {step: value for _, step, value in platform.received.points("learning_rate")}
    assert rates[0] == pytest.approx(0.1)
    assert rates[10] == pytest.approx(0.05)


def test_the_lightning_example(
    platform: FakePlatform, environment: dict[str, str], tmp_path: Path
) -> None:
    run_with_torch("lightning", environment, tmp_path)
    (created,) = platform.received.creates
    assert created["displayName"] == "Regressor"
    user = created["configs"]["userConfigs"]
    assert (user["hidden"], user["accumulate_grad_batches"], user["optimizers"]) == (
        16,
        2,
        ["Adam"],
    )
    # 8 batches of 32 per epoch, one optimizer step per 2 batches: steps 1..8.
    assert steps(platform, "step_time") == list(range(1, 9))
    assert steps(platform, "loss") == list(range(1, 9))
    assert steps(platform, "learning_rate") == list(range(1, 9))
    assert steps(platform, "val_loss") == [4, 8]
    assert steps(platform, "epoch") == [4, 8]
    assert "train_loss_epoch" in names(platform)
    assert [body["runPhase"] for _, _, body in platform.received.patches][-1] == "COMPLETED"


def test_the_transformers_example(
    platform: FakePlatform, environment: dict[str, str], tmp_path: Path
) -> None:
    run_with_torch("transformers", environment, tmp_path)
    (created,) = platform.received.creates
    assert created["displayName"] == "hf-regressor"
    assert created["configs"]["userConfigs"]["model"] == "Regressor"
    assert created["configs"]["userConfigs"]["learning_rate"] == 0.01
    # 2 epochs of 256 / 32 = 8 steps; a log every 2 steps; an evaluation per epoch.
    assert steps(platform, "step_time") == list(range(1, 17))
    assert steps(platform, "loss") == list(range(2, 17, 2))
    assert {"learning_rate", "grad_norm", "epoch", "train_runtime"} <= names(platform)
    assert steps(platform, "eval_loss") == [8, 16]
    assert [body["runPhase"] for _, _, body in platform.received.patches][-1] == "COMPLETED"

"""What the SDK records about a run's environment: typed, cheap, never a secret, and never
initialising JAX behind the program's back."""

import subprocess
import sys
from pathlib import Path

import jax

from mldiag.environment import (
    cpu_model,
    git_state,
    hardware_configs,
    packages_digest,
    relevant_environment,
    software_configs,
    user_configs,
    with_environment,
)

PACKAGES = [("jax", "0.10.2"), ("jaxlib", "0.10.2"), ("nvidia-cuda-runtime-cu12", "12.8.90")]


def test_versions_come_from_installed_packages_and_the_framework_from_imports(
    tmp_path: Path,
) -> None:
    configs = software_configs(
        env={"XLA_FLAGS": "--xla_dump_to=/tmp"}, packages=PACKAGES, cwd=tmp_path
    )
    assert configs["jax_version"] == "0.10.2"
    assert configs["cuda_version"] == "12.8.90"
    assert configs["framework"] == "jax"  # this test module imported jax
    assert configs["framework_version"] == "0.10.2"
    assert configs["xla_flags"] == "--xla_dump_to=/tmp"
    assert configs["python_version"].count(".") == 2
    assert "git" not in configs  # tmp_path is no checkout


def test_cuda_from_nvidia_images_when_no_package_says() -> None:
    configs = software_configs(env={"CUDA_VERSION": "12.4.1"}, packages=[])
    assert configs["cuda_version"] == "12.4.1"
    assert "libtpu_version" not in configs


def test_relevant_environment_keeps_accelerator_settings_and_drops_secrets() -> None:
    env = {
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9",
        "TPU_WORKER_ID": "3",
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "JAX_COORDINATOR_TOKEN": "secret",
        "NCCL_SOCKET_KEY": "secret",
        "HOME": "/root",
        "MLDIAG_TOKEN": "secret",
    }
    assert relevant_environment(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "TPU_WORKER_ID": "3",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9",
    }


def test_the_packages_digest_ignores_order_and_sees_a_version_change() -> None:
    digest = packages_digest(dict(PACKAGES))
    assert digest == packages_digest(dict(reversed(PACKAGES)))
    assert digest["count"] == 3 and len(digest["sha256"]) == 64
    assert digest != packages_digest({**dict(PACKAGES), "jax": "0.10.3"})


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=repo, check=True, capture_output=True, text=True).stdout


def test_git_commit_branch_and_dirty_flag(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "train.py").write_text("lr = 0.1\n")
    _git(tmp_path, "add", "train.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    commit = _git(tmp_path, "rev-parse", "HEAD").strip()
    assert git_state(tmp_path) == {"commit": commit, "dirty": False, "branch": "main"}
    (tmp_path / "notes.txt").write_text("untracked files do not make it dirty\n")
    assert git_state(tmp_path / ".")["dirty"] is False  # type: ignore[index]
    (tmp_path / "train.py").write_text("lr = 0.2\n")
    assert git_state(tmp_path)["dirty"] is True  # type: ignore[index]
    assert software_configs(packages=[], cwd=tmp_path)["git"]["commit"] == commit


def test_hardware_is_typed_and_includes_jax_devices_once_jax_is_up() -> None:
    jax.devices()  # the program has initialised JAX's backends
    configs = hardware_configs(env={"MEGASCALE_NUM_SLICES": "2", "SLURM_JOB_NUM_NODES": "4"})
    assert isinstance(configs["cpu_count"], int) and configs["cpu_count"] > 0
    assert isinstance(configs["memory_bytes"], int) and configs["memory_bytes"] > 2**20
    assert configs["device_type"] == "cpu"
    assert configs["device_count"] == jax.device_count()
    assert (configs["num_hosts"], configs["num_slices"]) == (1, 1)  # JAX knows better than env


def test_tpu_environment_describes_the_slice_when_jax_is_not_up() -> None:
    env = {"TPU_ACCELERATOR_TYPE": "v5litepod-16", "TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"}
    configs = hardware_configs(env=env, accelerators=dict)
    assert (configs["accelerator_type"], configs["device_type"]) == ("v5litepod-16", "tpu")
    assert configs["num_hosts"] == 4


def test_a_failing_probe_is_skipped() -> None:
    def broken() -> dict[str, object]:
        raise RuntimeError("driver gone")

    assert "device_type" not in hardware_configs(env={}, accelerators=broken)


def test_cpu_model_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9B14\n")
    assert cpu_model(cpuinfo) == "AMD EPYC 9B14"


def test_collecting_never_initialises_jax_itself() -> None:
    script = (
        "import jax, jax._src.xla_bridge as bridge\n"
        "from mldiag.environment import with_environment\n"
        "configs = with_environment({'userConfigs': {'lr': 0.1}})\n"
        "assert configs['softwareConfigs']['framework'] == 'jax'\n"
        "print(bridge.backends_are_initialized())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"


def test_user_configs_keep_their_types() -> None:
    configs = user_configs({"lr": 0.1, "layers": 2, "opt": {"name": "adam"}, "path": Path("/x")})
    assert configs == {"lr": 0.1, "layers": 2, "opt": {"name": "adam"}, "path": "/x"}


def test_sections_given_are_kept() -> None:
    configs = with_environment({"userConfigs": {}, "hardwareConfigs": {"chips": 4}})
    assert configs["hardwareConfigs"] == {"chips": 4}
    assert configs["softwareConfigs"]["packages"]["count"] > 10

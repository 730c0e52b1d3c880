"""The run's configs: what the user passed, plus what the SDK can see of its environment.

Collected once, on the SDK's thread before it creates the run (never in the caller's), and
kept cheap and harmless: nothing heavy is imported
(versions come from the installed packages' metadata; a framework is the run's framework
only when the program has imported it), accelerators are read from JAX only once JAX has
initialised its backends (asking earlier would initialise them, which breaks a later
``jax.distributed.initialize``), every probe that can fail is skipped when it does, and git
gets two seconds. Values keep their types: counts are numbers, ``dirty`` a boolean.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# Distribution name → config key of its version (the first installed one wins per key).
_VERSIONED_PACKAGES: tuple[tuple[str, str], ...] = (
    ("jax", "jax_version"),
    ("jaxlib", "jaxlib_version"),
    ("libtpu", "libtpu_version"),
    ("libtpu-nightly", "libtpu_version"),
    ("jax-cuda12-plugin", "jax_cuda_plugin_version"),
    ("jax-cuda13-plugin", "jax_cuda_plugin_version"),
    ("nvidia-cuda-runtime-cu12", "cuda_version"),
    ("nvidia-cuda-runtime-cu13", "cuda_version"),
    ("nvidia-cuda-runtime", "cuda_version"),
    ("nvidia-cudnn-cu12", "cudnn_version"),
    ("nvidia-cudnn-cu13", "cudnn_version"),
    ("nvidia-nccl-cu12", "nccl_version"),
    ("nvidia-nccl-cu13", "nccl_version"),
    ("flax", "flax_version"),
    ("optax", "optax_version"),
    ("orbax-checkpoint", "orbax_checkpoint_version"),
    ("torch", "torch_version"),
    ("tensorflow", "tensorflow_version"),
    ("transformers", "transformers_version"),
    ("numpy", "numpy_version"),
)
_FRAMEWORKS = (("jax", "jax"), ("torch", "pytorch"), ("tensorflow", "tensorflow"))
"""(module, framework name), in the order a program using several is classified."""

_RELEVANT_ENV = re.compile(
    r"^(JAX_|XLA_|TPU_|LIBTPU|MEGASCALE_|CUDA_|NCCL_|NVIDIA_|TF_(CPP_|XLA_|GPU_|ENABLE_|FORCE_)|PJRT_|TORCH_|OMP_NUM_THREADS$"
    r"|CUDA_VISIBLE_DEVICES$|SLURM_JOB_(NAME|NUM_NODES|PARTITION)$|SLURM_NNODES$)"
)
_SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|_KEY$|^KEY", re.IGNORECASE)
_GIT_TIMEOUT_SECONDS = 2.0

logger = logging.getLogger("mldiag")


def software_configs(
    env: Mapping[str, str] | None = None,
    packages: Iterable[tuple[str, str]] | None = None,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Python, framework and library versions, XLA flags and relevant environment, CUDA and
    libtpu versions when installed, the git commit of the code, and a packages digest."""
    env = os.environ if env is None else env
    installed = dict(_installed_packages() if packages is None else packages)
    configs: dict[str, Any] = {
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }
    for distribution, key in _VERSIONED_PACKAGES:
        if distribution in installed and key not in configs:
            configs[key] = installed[distribution]
    if "cuda_version" not in configs and env.get("CUDA_VERSION"):
        configs["cuda_version"] = env["CUDA_VERSION"]  # set by NVIDIA's CUDA images
    for module, framework in _FRAMEWORKS:
        if module in sys.modules:
            configs["framework"] = framework
            version = configs.get(f"{module}_version")
            if version is not None:
                configs["framework_version"] = version
            break
    if flags := env.get("XLA_FLAGS"):
        configs["xla_flags"] = flags
    if relevant := relevant_environment(env):
        configs["environment"] = relevant
    if git := git_state(cwd or _code_directory()):
        configs["git"] = git
    configs["packages"] = packages_digest(installed)
    return configs


def fingerprint(
    env: Mapping[str, str] | None = None,
    packages: Iterable[tuple[str, str]] | None = None,
    cwd: Path | None = None,
) -> dict[str, str]:
    """This process's environment in a few strings, for heartbeats: processes of one run
    whose fingerprints differ run different code or libraries (config drift).

    Only what is the same for every process of one environment, whatever its host, rank or
    moment: Python and library versions (installed packages, not imports), a digest of
    ``XLA_FLAGS`` and ``LIBTPU_INIT_ARGS`` (their sorted flags; left out when unset), the
    packages digest of ``softwareConfigs`` and the git commit of the code.
    """
    env = os.environ if env is None else env
    installed = dict(_installed_packages() if packages is None else packages)
    found = {"python_version": platform.python_version()}
    for distribution, key in _VERSIONED_PACKAGES:
        if distribution in installed and key not in found:
            found[key] = installed[distribution]
    for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS"):
        if flags := env.get(name, "").split():
            digest = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()
            found[f"{name.lower()}_sha256"] = digest[:16]
    found["packages_sha256"] = packages_digest(installed)["sha256"]
    if git := git_state(cwd or _code_directory()):
        found["git_commit"] = git["commit"]
    return found


def relevant_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that change how accelerators and frameworks behave, never secrets."""
    return {
        name: value
        for name, value in sorted(env.items())
        if _RELEVANT_ENV.match(name) and not _SECRET_ENV.search(name)
    }


def packages_digest(installed: Mapping[str, str]) -> dict[str, Any]:
    """How many distributions are installed, and a digest of ``name==version`` of each, so
    two runs can be seen to share (or not) an environment without listing it."""
    lines = "\n".join(f"{name}=={version}" for name, version in sorted(installed.items()))
    return {"count": len(installed), "sha256": hashlib.sha256(lines.encode()).hexdigest()}


def _installed_packages() -> Iterable[tuple[str, str]]:
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            yield re.sub(r"[-_.]+", "-", name).lower(), distribution.version


def _code_directory() -> Path:
    """Where the program's code lives: the main script's directory, else the cwd."""
    main = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if main is not None and main.is_file():
        return main.resolve().parent
    return Path.cwd()


def git_state(directory: Path) -> dict[str, Any] | None:
    """``{"commit", "dirty", "branch"}`` of the git checkout holding ``directory``, or None
    outside one (or without git, or when git is slow)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(  # fixed arguments, no shell
                ["git", *args],  # noqa: S607  # git from PATH is the point
                cwd=directory,
                capture_output=True,
                text=True,
                timeout=_GIT_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    state: dict[str, Any] = {"commit": commit}
    changes = git("status", "--porcelain", "--untracked-files=no")
    if changes is not None:
        state["dirty"] = bool(changes)
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":
        state["branch"] = branch
    return state


def hardware_configs(
    env: Mapping[str, str] | None = None,
    accelerators: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The machine (OS, CPU model and count, memory) and its accelerators: from JAX once it
    has initialised, else from NVML, else from the TPU / Slurm environment."""
    env = os.environ if env is None else env
    configs: dict[str, Any] = {
        "os": platform.system().lower(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count() or 0,
    }
    if model := cpu_model():
        configs["cpu_model"] = model
    if memory := memory_bytes():
        configs["memory_bytes"] = memory
    configs.update(_from_environment(env))
    probe = accelerators or _accelerators
    try:
        configs.update(probe())
    except Exception:  # a probe that fails describes nothing; never fail init
        logger.debug(
            "mldiag: the accelerator probe failed; hardware configs without it", exc_info=True
        )
    return configs


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``, else what ``platform`` says)."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor()


def memory_bytes() -> int:
    """Physical memory of the host in bytes (0 when the system will not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    """What TPU VMs, multislice jobs and Slurm say about the workload's shape."""
    found: dict[str, Any] = {}
    if accelerator_type := env.get("TPU_ACCELERATOR_TYPE"):
        found["accelerator_type"] = accelerator_type
        found["device_type"] = "tpu"
    if hostnames := env.get("TPU_WORKER_HOSTNAMES"):
        found["num_hosts"] = len([name for name in hostnames.split(",") if name])
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if env.get(name, "").isdigit():
            found.setdefault("num_hosts", int(env[name]))
    if env.get("MEGASCALE_NUM_SLICES", "").isdigit():
        found["num_slices"] = int(env["MEGASCALE_NUM_SLICES"])
    return found


def _accelerators() -> dict[str, Any]:
    jax = sys.modules.get("jax")
    if jax is not None and _jax_backends_ready():
        return jax_accelerators(jax)
    return _nvidia_accelerators()


def _jax_backends_ready() -> bool:
    bridge = sys.modules.get("jax._src.xla_bridge")
    ready = getattr(bridge, "backends_are_initialized", None)
    return bool(callable(ready) and ready())


def jax_accelerators(jax: Any) -> dict[str, Any]:
    """Device kind and counts, hosts and slices, from an initialised JAX."""
    devices = list(jax.devices())
    if not devices:
        return {}
    first = devices[0]
    slices = {getattr(device, "slice_index", 0) for device in devices}
    return {
        "device_type": first.platform,
        "device_kind": first.device_kind,
        "device_count": len(devices),
        "local_device_count": jax.local_device_count(),
        "num_hosts": jax.process_count(),
        "num_slices": len(slices),
        "devices_per_slice": len(devices) // max(len(slices), 1),
    }


def _nvidia_accelerators() -> dict[str, Any]:
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415  # optional

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001  # no library, no driver: no NVIDIA GPU to describe
        return {}
    try:
        count = pynvml.nvmlDeviceGetCount()
        if not count:
            return {}
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(handle)
        return {
            "device_type": "gpu",
            "device_kind": name.decode() if isinstance(name, bytes) else str(name),
            "local_device_count": int(count),
            "device_memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            "nvidia_driver_version": str(pynvml.nvmlSystemGetDriverVersion()),
        }
    finally:
        pynvml.nvmlShutdown()


def user_configs(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's configs as JSON, values keeping their types; ``str()`` for anything else,
    so that a stray object cannot fail the create."""
    loaded: dict[str, Any] = json.loads(json.dumps(dict(user or {}), default=str))
    return loaded


def with_environment(configs: Mapping[str, Any]) -> dict[str, Any]:
    """``configs`` (the run resource's shape) with the software and hardware sections the
    SDK collects; sections already given are kept as they are."""
    return {
        "softwareConfigs": software_configs(),
        "hardwareConfigs": hardware_configs(),
        **configs,
    }

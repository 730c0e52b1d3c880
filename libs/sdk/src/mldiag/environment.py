"""The run's configs: what the user passed, plus what the SDK can see of its environment.

Nothing heavy is imported to find out: a framework counts only when the program has already
imported it.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Mapping
from typing import Any


def software_configs(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Python, the frameworks already imported, and XLA flags."""
    env = os.environ if env is None else env
    configs = {"python_version": platform.python_version()}
    for module in ("jax", "jaxlib", "torch", "tensorflow", "libtpu"):
        loaded = sys.modules.get(module)
        version = getattr(loaded, "__version__", None) if loaded is not None else None
        if isinstance(version, str):
            configs[f"{module}_version"] = version
    if "jax" in sys.modules:
        configs["framework"] = "jax"
    elif "torch" in sys.modules:
        configs["framework"] = "pytorch"
    if flags := env.get("XLA_FLAGS"):
        configs["xla_flags"] = flags
    return configs


def hardware_configs() -> dict[str, str]:
    """The machine: OS, architecture, CPU count."""
    return {
        "os": platform.system().lower(),
        "machine": platform.machine(),
        "cpu_count": str(os.cpu_count() or 0),
    }


def run_configs(user: Mapping[str, Any] | None) -> dict[str, Any]:
    """``configs`` in the run resource's shape; user values keep their JSON types."""
    return {
        # A JSON round trip (str() for the rest) so that a stray object cannot fail the create.
        "userConfigs": json.loads(json.dumps(dict(user or {}), default=str)),
        "softwareConfigs": software_configs(),
        "hardwareConfigs": hardware_configs(),
    }

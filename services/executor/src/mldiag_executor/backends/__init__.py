"""Where executors run replicas: ``local`` (processes here), ``ray``, ``kubernetes``.

Every backend module exposes ``create(settings: ExecutorSettings) -> Backend``.
"""

import importlib
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from mldiag_executor.backends.base import Backend
    from mldiag_executor.settings import ExecutorSettings


def create_backend(settings: "ExecutorSettings") -> "Backend":
    """The backend ``settings.backend`` names (its module is imported only then)."""
    module = importlib.import_module(f"mldiag_executor.backends.{settings.backend}")
    return cast("Backend", module.create(settings))

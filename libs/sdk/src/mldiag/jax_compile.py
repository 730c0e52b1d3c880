"""JAX compilations as a metric: ``compile_time``, one point per XLA backend compilation.

JAX reports every backend compilation's duration to the listeners registered with
``jax.monitoring``; the event detector's recompilation-storm rule counts those points. The
listener runs in the compiling thread, so it only hands the duration to a non-blocking
recorder and never raises. JAX is never imported here unless asked: importing it is the
program's choice (and a heavy one).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("mldiag")

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""The duration event JAX records around each XLA backend compilation (``jax._src.dispatch``;
a persistent-cache hit is reported too, with its much shorter retrieval time)."""


class CompileWatcher:
    """Calls ``record(seconds)`` for every JAX backend compilation while started."""

    def __init__(self, record: Callable[[float], None]) -> None:
        self._record = record
        self._monitoring: Any = None
        # One bound-method object, so that unregistering finds the very one registered.
        self._listener = self._on_duration

    @property
    def watching(self) -> bool:
        """Whether a listener is registered."""
        return self._monitoring is not None

    def start(self, *, import_jax: bool = False) -> bool:
        """Register the listener; True when watching (already, or now).

        Without ``import_jax``, does nothing unless the program has imported JAX already.
        """
        if self._monitoring is not None:
            return True
        if not import_jax and "jax" not in sys.modules:
            return False
        try:
            monitoring = importlib.import_module("jax.monitoring")
            monitoring.register_event_duration_secs_listener(self._listener)
        except Exception:  # no JAX, or one without monitoring: nothing to watch
            logger.debug("mldiag: JAX compile events not available", exc_info=True)
            return False
        self._monitoring = monitoring
        return True

    def stop(self) -> None:
        """Unregister the listener where this JAX allows it (else it records nothing more:
        the run's ``record`` ignores calls once the run has finished)."""
        monitoring, self._monitoring = self._monitoring, None
        if monitoring is None:
            return
        unregister = getattr(monitoring, "unregister_event_duration_listener", None)
        if unregister is None:  # older JAX: only a private helper
            private = sys.modules.get("jax._src.monitoring")
            unregister = getattr(private, "_unregister_event_duration_listener_by_callback", None)
        if unregister is not None:
            with contextlib.suppress(Exception):  # it asserts the listener is there
                unregister(self._listener)

    def _on_duration(self, event: str, duration_secs: float, **_: object) -> None:
        if event != BACKEND_COMPILE_EVENT:
            return
        try:
            self._record(float(duration_secs))
        except Exception:  # telemetry must never fail a compilation
            logger.debug("mldiag: compile_time not recorded", exc_info=True)

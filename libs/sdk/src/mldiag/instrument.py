"""Marks on the current run (see :func:`mldiag.init`) for code that does not hold the run:
data-loading and checkpoint helpers, an orchestrator's preemption hook.

Without a current run each is a no-op, so a library can call them unconditionally.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

from mldiag.run import current_run


def data_wait() -> AbstractContextManager[None]:
    """``with mldiag.data_wait():`` times a wait for input on the current run
    (:meth:`mldiag.Run.data_wait`); does nothing without one."""
    run = current_run()
    return contextlib.nullcontext() if run is None else run.data_wait()


def checkpoint() -> AbstractContextManager[None]:
    """``with mldiag.checkpoint():`` times a blocking checkpoint save on the current run
    (:meth:`mldiag.Run.checkpoint`); does nothing without one."""
    run = current_run()
    return contextlib.nullcontext() if run is None else run.checkpoint()


def preemption_notice(reason: str = "", message: str = "") -> bool:
    """Report on the current run that this host is about to be preempted or maintained
    (:meth:`mldiag.Run.preemption_notice`); False without a run or when it was not sent."""
    run = current_run()
    return False if run is None else run.preemption_notice(reason, message)

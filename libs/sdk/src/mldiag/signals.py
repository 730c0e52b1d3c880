"""Lifecycle signals (SIGTERM, preemption notice, exception, process exit) sent to ingestion's
``POST /v1/machineLearningRuns/{run}:reportSignal``.

A signal is sent at once, synchronously, within a bounded time: it is mostly reported on the
way out of a process, when no SDK thread can be relied on to send it later. It is never
spooled (a SIGTERM reported by the next process would be about the wrong one) and never
raises. The time is stamped once, so a retry carries the same time and ingestion publishes
it once.
"""

from __future__ import annotations

import enum
import logging
import ssl
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from mldiag.transport import client

logger = logging.getLogger("mldiag")

DEFAULT_SIGNAL_TIMEOUT = 2.0
"""Most seconds one report may take, retries included, unless told otherwise: exit paths
(a SIGTERM with a grace period) must stay short."""

MAX_EXCEPTION_CHARS = 4000
"""How much of an exception's text a signal carries."""

# The contract's bounds (``SignalRequest``): longer values are cut, never refused.
_MAX_MESSAGE = 20_000
_MAX_REASON = 100
_MAX_SIGNAL = 20
_MAX_ERROR_TYPE = 200

_RETRY_PAUSE = 0.1


class SignalKind(enum.StrEnum):
    """What happened to a process (the platform's ``SignalKind``)."""

    SIGTERM = "SIGTERM"
    """The process was asked to stop (scheduler, preemption, a person)."""
    PREEMPTION_NOTICE = "PREEMPTION_NOTICE"
    """The platform announced a preemption or maintenance event ahead of time."""
    EXCEPTION = "EXCEPTION"
    """An exception escaped the workload's main thread."""
    PROCESS_EXITED = "PROCESS_EXITED"
    """A monitored process ended (its exit code or the signal that killed it)."""


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal of one process, as sent (camelCase on the wire)."""

    kind: SignalKind
    host: str
    process_index: int
    pid: int
    step: int | None
    time: datetime
    exit_code: int | None = None
    signal: str | None = None
    error_type: str | None = None
    reason: str = ""
    message: str = ""

    def body(self) -> dict[str, Any]:
        """The ``SignalRequest`` JSON body: unset fields left out, long texts cut to the
        contract's bounds (a report is never refused for its length)."""
        body: dict[str, Any] = {
            "kind": self.kind.value,
            "host": self.host,
            "processIndex": self.process_index,
            "pid": self.pid,
            "time": self.time.isoformat(),
        }
        optional: dict[str, Any] = {
            "step": self.step,
            "exitCode": self.exit_code,
            "signal": _cut(self.signal, _MAX_SIGNAL),
            "errorType": _cut(self.error_type, _MAX_ERROR_TYPE),
            "reason": _cut(self.reason, _MAX_REASON),
            "message": _cut(self.message, _MAX_MESSAGE),
        }
        body.update({key: value for key, value in optional.items() if value not in (None, "")})
        return body


def _cut(text: str | None, limit: int) -> str | None:
    return None if text is None else text[:limit]


class SignalSender:
    """Posts signals of one run to ingestion."""

    def __init__(self, ingestion_url: str, run_id: str, token: str) -> None:
        self._url = f"{ingestion_url}/v1/machineLearningRuns/{run_id}:reportSignal"
        self._token = token
        self._ssl: ssl.SSLContext | None = None

    def send(self, signal: Signal, timeout: float = DEFAULT_SIGNAL_TIMEOUT) -> bool:
        """Send ``signal``; True once ingestion accepted it. Retries a network error or a
        5xx until ``timeout`` seconds have passed; never raises."""
        deadline = time.monotonic() + max(timeout, 0.0)
        body = signal.body()
        if self._ssl is None:  # built once: it is most of what a new client costs
            self._ssl = httpx.create_ssl_context()
        failure = "no time left"
        # A client of its own per report: a signal handler may interrupt the main thread
        # inside another request, and a shared client's pool lock is not re-entrant.
        with client(self._token, timeout, verify=self._ssl) as http:
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    response = http.post(self._url, json=body, timeout=remaining)
                except httpx.HTTPError as error:
                    failure = f"{type(error).__name__}: {error}"
                else:
                    if response.status_code < 300:
                        return True
                    failure = f"{response.status_code}: {response.text[:500]}"
                    if response.status_code < 500 and response.status_code != 429:
                        break  # refused: the same body would be refused again
                time.sleep(min(_RETRY_PAUSE, max(deadline - time.monotonic(), 0.0)))
        logger.warning(
            "mldiag.signal.not_sent kind=%s url=%s error=%s", signal.kind.value, self._url, failure
        )
        return False

"""Heartbeats: every few seconds, on a thread of their own, each process tells ingestion it is
alive and which step it last logged. The event detector's hang rule reads them.

A heartbeat is liveness, not data: one that cannot be sent is dropped, never spooled or
retried (a late one would claim life at a time the process was not heard from). The thread
never touches the caller's thread and never raises.

Each heartbeat also carries the process's fingerprint (:func:`mldiag.environment.fingerprint`),
collected once on this thread before the first beat: hosts of one run whose fingerprints
differ are the event detector's config drift.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from mldiag.environment import fingerprint as environment_fingerprint

logger = logging.getLogger("mldiag")


class Heartbeat:
    """Posts ``:heartbeat`` every ``interval`` seconds until :meth:`stop`."""

    def __init__(
        self,
        http: httpx.Client,
        ingestion_url: str,
        run_id: str,
        *,
        host: str,
        process_index: int,
        interval: float,
        last_step: Callable[[], int | None],
        fingerprint: Callable[[], dict[str, str]] = environment_fingerprint,
    ) -> None:
        self._http = http
        self._url = f"{ingestion_url}/v1/machineLearningRuns/{run_id}:heartbeat"
        self._host = host
        self._process_index = process_index
        self._interval = interval
        self._last_step = last_step
        self._collect_fingerprint = fingerprint
        self._fingerprint: dict[str, str] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mldiag-heartbeat", daemon=True)
        self._warned = False

    def start(self) -> None:
        """Beat now, then every interval."""
        self._thread.start()

    def stop(self) -> None:
        """Beat no more. A beat in flight is not waited for: shutdown stays bounded."""
        self._stopped.set()

    def beat(self) -> bool:
        """Send one heartbeat now; True when ingestion took it. Never raises."""
        body = {
            "host": self._host,
            "processIndex": self._process_index,
            "pid": os.getpid(),
            "step": self._last_step(),
            "intervalSeconds": self._interval,
            "time": datetime.now(UTC).isoformat(),
        }
        if self._fingerprint:
            body["fingerprint"] = self._fingerprint
        try:
            response = self._http.post(self._url, json=body, timeout=min(self._interval, 5.0))
        except httpx.HTTPError as error:
            logger.debug("mldiag: heartbeat not sent: %s", error)
            return False
        if response.status_code >= 300:
            if not self._warned:  # a rejected heartbeat will be rejected again: say it once
                logger.warning(
                    "mldiag: heartbeat refused (%s): %s",
                    response.status_code,
                    response.text[:500],
                )
                self._warned = True
            return False
        return True

    def _loop(self) -> None:
        try:
            self._fingerprint = _bounded(self._collect_fingerprint())
        except Exception:  # a probe that fails leaves the fingerprint out
            logger.debug("mldiag: no fingerprint", exc_info=True)
        while not self._stopped.is_set():
            self.beat()
            self._stopped.wait(self._interval)


_MAX_ENTRIES, _MAX_KEY, _MAX_VALUE = 64, 100, 500
"""The contract's bounds on a fingerprint: a longer one would get every heartbeat refused."""


def _bounded(found: dict[str, str]) -> dict[str, str]:
    return {
        str(key)[:_MAX_KEY]: str(value)[:_MAX_VALUE]
        for key, value in list(found.items())[:_MAX_ENTRIES]
    }

"""Heartbeats: every few seconds, on a thread of their own, each process tells ingestion it is
alive and which step it last logged. The event detector's hang rule reads them.

A heartbeat is liveness, not data: one that cannot be sent is dropped, never spooled or
retried (a late one would claim life at a time the process was not heard from). The thread
never touches the caller's thread and never raises.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

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
    ) -> None:
        self._http = http
        self._url = f"{ingestion_url}/v1/machineLearningRuns/{run_id}:heartbeat"
        self._host = host
        self._process_index = process_index
        self._interval = interval
        self._last_step = last_step
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
        while not self._stopped.is_set():
            self.beat()
            self._stopped.wait(self._interval)

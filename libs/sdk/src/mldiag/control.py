"""Creating, attaching to and finishing a run: everything the SDK asks of the run registry.

:class:`RunControl` is the seam: the sender thread calls it and knows no URL. The HTTP
implementation holds every detail of the registry's run API (create with a chosen id, 409
means attach; the phase update as ``PATCH …?updateMask=runPhase,errorDetails`` with the
etag from a ``GET``, ``errorDetails`` carrying a message and, when known, a code), so a
change of that contract is a change here only.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

logger = logging.getLogger("mldiag")


class RunPhase(enum.StrEnum):
    """The settable phase of a run (the registry's ``runPhase``)."""

    ACTIVE = "ACTIVE"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What the SDK knows about the run it creates or attaches to."""

    run_id: str
    display_name: str
    run_set: str = "default"
    labels: dict[str, str] = field(default_factory=dict)
    configs: dict[str, Any] = field(default_factory=dict)
    gcs_path: str = ""
    monitoring: dict[str, Any] = field(default_factory=dict)
    """Overrides of the detection rules (``{"rules": {name: {"enabled", "thresholds"}}}``)."""


class ControlStatus(enum.Enum):
    """The answer of a control call."""

    DONE = "done"
    ATTACHED = "attached"
    """The run existed already (another host created it, or this is a restart)."""
    RETRY = "retry"
    """The registry was unreachable or busy: try again later."""
    GIVE_UP = "give_up"
    """The registry refused, or does not support it: do not try again."""


class RunControl(Protocol):
    """Changes to the run resource (made by process 0 only)."""

    def ensure_run(self, spec: RunSpec, timeout: float) -> ControlStatus:
        """Create the run, or attach to it when it already exists."""

    def set_phase(
        self,
        run_id: str,
        phase: RunPhase,
        error: str | None,
        timeout: float,
        *,
        code: str | None = None,
    ) -> ControlStatus:
        """Move the run to ``phase``, with ``error`` (and ``code``, an exception type or a
        signal name) as its error details when failing."""


class HttpRunControl:
    """:class:`RunControl` over the run registry's REST API."""

    def __init__(
        self,
        http: httpx.Client,
        api_url: str,
        *,
        project: str | None = None,
        location: str | None = None,
    ) -> None:
        self._http = http
        # The long resource form when a project or location is named (the other defaults to
        # the short form's "default" / "local"), so the run is created in that project.
        scope = f"/projects/{project or 'default'}/locations/{location or 'local'}"
        self._runs = f"{api_url}/v1{scope if project or location else ''}/machineLearningRuns"
        self._warned_phase = False
        self._warned_create = False

    def run_url(self, run_id: str) -> str:
        """The run's URL in the registry (in this control's project and location)."""
        return f"{self._runs}/{run_id}"

    def ensure_run(self, spec: RunSpec, timeout: float) -> ControlStatus:
        """``POST`` the run with its id; 409 (it exists) means attach.

        Optional fields a registry may not know yet (configs, artifacts) are dropped and the
        create retried once when the first attempt is refused as invalid.
        """
        body: dict[str, Any] = {
            "runId": spec.run_id,
            "displayName": spec.display_name,
            "runSet": spec.run_set or "default",
            "labels": spec.labels,
        }
        extras: dict[str, Any] = {}
        if spec.configs:
            extras["configs"] = spec.configs
        if spec.gcs_path:
            extras["artifacts"] = {"gcsPath": spec.gcs_path}
        if spec.monitoring:
            extras["monitoring"] = spec.monitoring
        status = self._create({**body, **extras}, timeout)
        if status in (400, 422) and extras:
            logger.warning("mldiag.run.create_without_extras fields=%s", sorted(extras))
            status = self._create(body, timeout)
        if status is None or status >= 500 or status == 429:
            return ControlStatus.RETRY
        if status == 409:
            return ControlStatus.ATTACHED
        if status < 300:
            return ControlStatus.DONE
        logger.error("mldiag.run.create_refused run=%s status=%d", spec.run_id, status)
        return ControlStatus.GIVE_UP

    def set_phase(
        self,
        run_id: str,
        phase: RunPhase,
        error: str | None,
        timeout: float,
        *,
        code: str | None = None,
    ) -> ControlStatus:
        """``GET`` the etag, then ``PATCH`` ``runPhase`` and ``errorDetails``."""
        url = f"{self._runs}/{run_id}"
        try:
            current = self._http.get(url, timeout=timeout)
            if current.status_code in (404, 405):
                return self._unsupported(run_id, current.status_code)
            if current.status_code >= 300:
                return _retry_or_give_up(current.status_code)
            details: dict[str, Any] = {"message": error or ""}
            if code:
                details["code"] = code
            body: dict[str, Any] = {"runPhase": phase.value, "errorDetails": details}
            if etag := current.json().get("etag"):
                body["etag"] = etag
            response = self._http.patch(
                url, params={"updateMask": "runPhase,errorDetails"}, json=body, timeout=timeout
            )
        except (httpx.HTTPError, ValueError) as failure:
            logger.warning("mldiag.run.phase_unreachable run=%s error=%s", run_id, failure)
            return ControlStatus.RETRY
        if response.status_code in (404, 405):
            return self._unsupported(run_id, response.status_code)
        if response.status_code < 300:
            return ControlStatus.DONE
        return _retry_or_give_up(response.status_code)

    def _create(self, body: dict[str, Any], timeout: float) -> int | None:
        try:
            status = self._http.post(self._runs, json=body, timeout=timeout).status_code
        except httpx.HTTPError as failure:
            if not self._warned_create:  # once per outage, not once per retry
                self._warned_create = True
                logger.warning("mldiag.run.create_unreachable error=%s (will retry)", failure)
            return None
        self._warned_create = False
        return status

    def _unsupported(self, run_id: str, status: int) -> ControlStatus:
        if not self._warned_phase:
            self._warned_phase = True
            logger.warning(
                "mldiag.run.phase_unsupported run=%s status=%d "
                "(this server cannot change a run's phase yet)",
                run_id,
                status,
            )
        return ControlStatus.GIVE_UP


def _retry_or_give_up(status: int) -> ControlStatus:
    if status >= 500 or status in (408, 409, 412, 429):  # 409/412: a stale etag, refetch
        return ControlStatus.RETRY
    return ControlStatus.GIVE_UP

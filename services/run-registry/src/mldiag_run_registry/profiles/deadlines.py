"""Captures the xprof-provisioner never finished are failed once their time is up.

A capture's operation stays pending until the provisioner answers. If it never does (no
provisioner running, its command dead-lettered, the process killed mid-capture), the
operation would wait forever and `:wait` with it. Past its trace length plus a grace, the
sweeper finishes it the way a provisioner failure would: ``capture_timed_out``, with every
host still ACTIVE marked FAILED. Finishing is idempotent, so replicas sweeping together, or
a provisioner answering late, change nothing more; a host whose file lands later still
reports SUCCEEDED.
"""

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_platform.periodic import periodically
from mldiag_run_registry.profiles.captures import CapturesService
from mldiag_run_registry.profiles.repository import ProfilesRepository
from mldiag_schemas.profiling import ProfileCaptureFinished, ProfilerSessionPhase

log = structlog.get_logger(__name__)

CAPTURE_TIMED_OUT = "capture_timed_out"


class CaptureDeadlines:
    """Finds pending captures past their deadline and fails them."""

    def __init__(
        self, repository: ProfilesRepository, captures: CapturesService, grace: timedelta
    ) -> None:
        self._repository = repository
        self._captures = captures
        self._grace = grace

    async def sweep(self, now: datetime | None = None) -> int:
        """Fail every overdue capture; how many were."""
        now = now or datetime.now(UTC)
        failed = 0
        for pending in await self._repository.pending_captures(now - self._grace):
            state = await self._repository.get_session(pending.run_id, pending.session_id)
            session = state.session if state is not None else None
            allowed = timedelta(seconds=(session.duration_seconds or 0) if session else 0)
            if pending.create_time + allowed + self._grace > now:
                continue
            waited = (now - pending.create_time).total_seconds()
            active = [
                host.host
                for host in (session.hosts if session else [])
                if host.phase is ProfilerSessionPhase.ACTIVE
            ]
            await self._captures.on_capture_finished(
                ProfileCaptureFinished(
                    run_id=pending.run_id,
                    session_id=pending.session_id,
                    operation=pending.operation,
                    error_code=CAPTURE_TIMED_OUT,
                    error_message=f"the xprof-provisioner did not finish the capture within"
                    f" {waited:.0f} s (its trace length plus {self._grace.total_seconds():.0f} s):"
                    " is it running? See its log.",
                    missing_hosts=active,
                    occurred_at=now,
                )
            )
            log.warning(
                "profiles.capture.timed_out",
                run_id=pending.run_id,
                session_id=pending.session_id,
                operation=pending.operation,
                waited_s=round(waited, 1),
            )
            failed += 1
        return failed


def sweeping(
    deadlines: CaptureDeadlines, every_seconds: float
) -> contextlib.AbstractAsyncContextManager[asyncio.Task[None]]:
    """Sweep every ``every_seconds`` for as long as the block runs (a failed sweep is logged
    and retried at the next tick)."""
    return periodically(
        deadlines.sweep,
        every_seconds,
        name="capture-deadlines",
        failed="profiles.capture.sweep_failed",
    )

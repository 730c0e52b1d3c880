"""The consumer of the registry's session changes: keeping running instances' copies current
and pre-warming sessions that landed. The only bus module of that job.

Warming is shared work: the replicas split the durable, and each session is warmed once.
Syncing is not: every replica must copy a changed session into the instances it runs, so
each one also follows the changes on core NATS (:meth:`SessionsBusHandler.on_change_seen`).
A replica that misses one there (reconnecting at that moment) still has the durable's copy
when it is the one that got it, and opens with every session that exists.

Every failure here is logged and the message acked: a session that could not be synced is
copied anyway when an instance opens it, and one that could not be warmed still opens, only
slower; retrying a broken xplane would only burn the conversion again, and a poison message
must not hold back the sessions behind it.
"""

import asyncio
from datetime import datetime

import structlog
from prometheus_client import Counter

from mldiag_platform.bus import ConsumerSpec, Delivery
from mldiag_schemas import bus
from mldiag_schemas.messages import parse_message
from mldiag_schemas.profiling import ProfilerSession, ProfilerSessionChanged
from mldiag_xprof_provisioner.instances.service import XProfProvisioner
from mldiag_xprof_provisioner.warm.service import WARMS, SessionWarmer

log = structlog.get_logger(__name__)

CHANGES_SEEN = Counter(
    "mldiag_xprof_session_changes_seen_total",
    "Session changes this replica saw on core NATS and synced into its instances.",
)

SESSION_CHANGES = bus.PROFILER_SESSION_CHANGED + ".*"
"""What every replica follows on core NATS to keep its own instances' copies current."""

SESSIONS_CONSUMER: ConsumerSpec[ProfilerSessionChanged] = ConsumerSpec(
    stream=bus.PROFILING,
    subject=bus.PROFILER_SESSION_CHANGED + ".*",
    durable=bus.PROVISIONER_SESSIONS_DURABLE,
    message_type=ProfilerSessionChanged,
    # Small batches: a batch is acked once its warms are done, and each takes seconds.
    batch_size=8,
)


class SessionsBusHandler:
    """Syncs every changed session into the instances serving its run, then warms it."""

    def __init__(self, provisioner: XProfProvisioner, warmer: SessionWarmer) -> None:
        self._provisioner = provisioner
        self._warmer = warmer

    async def on_sessions(self, deliveries: list[Delivery[ProfilerSessionChanged]]) -> None:
        """Handle the newest state of each session in the batch; never raises."""
        latest: dict[tuple[str, str], ProfilerSession] = {}
        for delivery in deliveries:
            session = delivery.message.session
            key = (session.run_id, session.session_id)
            known = latest.get(key)
            if known is None or _order(session) >= _order(known):
                latest[key] = session
        await asyncio.gather(*(self._on_session(session) for session in latest.values()))

    async def on_change_seen(self, _subject: str, payload: bytes) -> None:
        """Sync a change seen on core NATS into this replica's instances; never raises."""
        try:
            message = parse_message(payload)
        except ValueError as exc:
            log.warning("xprof.session.change_unreadable", error=str(exc)[:300])
            return
        if isinstance(message, ProfilerSessionChanged):
            CHANGES_SEEN.inc()
            await self._sync(message.session)

    async def _on_session(self, session: ProfilerSession) -> None:
        bound = log.bind(run_id=session.run_id, session_id=session.session_id)
        await self._sync(session)
        try:
            await self._warmer.warm(session)
        except Exception as exc:  # noqa: BLE001  # see the module docstring
            WARMS.labels("failed").inc()
            bound.warning("xprof.warm.failed", error=getattr(exc, "message", repr(exc)))

    async def _sync(self, session: ProfilerSession) -> None:
        bound = log.bind(run_id=session.run_id, session_id=session.session_id)
        try:
            copied = await self._provisioner.sync_session(session.run_id, session.session_id)
        except Exception as exc:  # noqa: BLE001  # see the module docstring
            bound.warning("xprof.session.sync_failed", error=repr(exc))
        else:
            bound.debug("xprof.session.changed", phase=session.phase.value, copied=copied)


def _order(session: ProfilerSession) -> tuple[datetime, bool]:
    # Merges only move forward: the newest update wins, and prewarmed never goes back.
    return (session.update_time, session.prewarmed)

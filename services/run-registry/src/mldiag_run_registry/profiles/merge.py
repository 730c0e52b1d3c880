"""Merging per-host reports into a profiler session: pure functions, no I/O.

A session is the sum of its hosts' latest reports. Per host the report with the newest
``update_time`` wins; at an equal time a finished phase beats ACTIVE (and FAILED beats
SUCCEEDED), then the report that names its file, and last the report's content decides, so
any order and any number of repeats of the same reports give the same session.
Session-level facts only ever grow: ``prewarmed`` stays true once set, workload events are
appended once, the duration is the longest reported.
"""

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from mldiag_schemas.profiling import (
    ProfilerSession,
    ProfilerSessionHost,
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReport,
    session_name,
)

_PHASE_RANK = {
    ProfilerSessionPhase.ACTIVE: 0,
    ProfilerSessionPhase.SUCCEEDED: 1,
    ProfilerSessionPhase.FAILED: 2,
}


@dataclass(frozen=True)
class SessionState:
    """A session as stored: the resource (without its dashboard link, which depends on
    where XProf is served and is added when served) and when each host's part was true."""

    project: str
    location: str
    session: ProfilerSession
    host_times: Mapping[str, datetime] = field(default_factory=dict)

    @property
    def hosts(self) -> dict[str, ProfilerSessionHost]:
        """The hosts' parts by host."""
        return {host.host: host for host in self.session.hosts}


def session_phase(hosts: Iterable[ProfilerSessionHost]) -> ProfilerSessionPhase:
    """ACTIVE while any host is, else FAILED if any failed, else SUCCEEDED."""
    phases = {host.phase for host in hosts}
    if not phases or ProfilerSessionPhase.ACTIVE in phases:
        return ProfilerSessionPhase.ACTIVE  # no host yet: nothing has landed
    if ProfilerSessionPhase.FAILED in phases:
        return ProfilerSessionPhase.FAILED
    return ProfilerSessionPhase.SUCCEEDED


def _host_key(
    host: ProfilerSessionHost, time: datetime
) -> tuple[bool, datetime, int, bool, int, str]:
    # A host traces once per session: once it finished, no ACTIVE report (however new; a
    # clock ahead, a redelivery) takes it back. Then the newest wins; past time and phase,
    # the part that knows its file; the content settles the rest.
    return (
        host.phase is not ProfilerSessionPhase.ACTIVE,
        time,
        _PHASE_RANK[host.phase],
        bool(host.file_uri),
        host.size_bytes,
        host.model_dump_json(),
    )


def merge_host(
    current: tuple[ProfilerSessionHost, datetime] | None,
    incoming: tuple[ProfilerSessionHost, datetime],
) -> tuple[ProfilerSessionHost, datetime]:
    """The host's part after ``incoming``: the one with the greater key wins whole, except
    that a start time only one of them knows is kept (a host's trace began once)."""
    if current is None:
        return incoming
    winner, loser = (
        (incoming, current) if _host_key(*incoming) > _host_key(*current) else (current, incoming)
    )
    host, time = winner
    if host.start_time is None and loser[0].start_time is not None:
        host = host.model_copy(update={"start_time": loser[0].start_time})
    return host, time


def settle(
    state: SessionState,
    hosts: Mapping[str, tuple[ProfilerSessionHost, datetime]],
    **changes: object,
) -> SessionState:
    """``state`` with these hosts, its phase and end time derived from them, and
    ``changes`` applied to the session."""
    ordered = [hosts[name][0] for name in sorted(hosts)]
    phase = session_phase(ordered)
    end_time = None
    if phase is not ProfilerSessionPhase.ACTIVE:
        # the last host to finish; its end time if it said one, else when it said it ended
        end_time = max(host.end_time or hosts[host.host][1] for host in ordered)
    session = state.session.model_copy(
        update={"hosts": ordered, "phase": phase, "end_time": end_time, **changes}
    )
    return SessionState(
        state.project,
        state.location,
        session,
        {name: time for name, (_, time) in hosts.items()},
    )


def _timed_hosts(state: SessionState) -> dict[str, tuple[ProfilerSessionHost, datetime]]:
    return {
        host.host: (host, state.host_times.get(host.host, state.session.update_time))
        for host in state.session.hosts
    }


def new_state(
    project: str,
    location: str,
    run_id: str,
    session_id: str,
    kind: ProfilerSessionKind,
    time: datetime,
    **fields: object,
) -> SessionState:
    """An empty session (no hosts yet) created at ``time``; ``fields`` set the rest."""
    session = ProfilerSession.model_validate(
        {
            "name": session_name(project, location, run_id, session_id),
            "session_id": session_id,
            "run_id": run_id,
            "kind": kind,
            "phase": ProfilerSessionPhase.ACTIVE,
            "create_time": time,
            "update_time": time,
            **fields,
        }
    )
    return SessionState(project, location, session)


def merge_report(
    state: SessionState | None,
    report: ProfilerSessionReport,
    *,
    project: str,
    location: str,
    run_id: str,
    received_at: datetime,
    default_folder: str,
) -> SessionState:
    """The session after ``report`` (created by it if ``state`` is None).

    ``received_at`` stands for the report's time when it carries none; ``default_folder`` is
    the storage folder of a session whose reports name none.
    """
    time = report.update_time or received_at
    if state is None:
        state = new_state(
            project,
            location,
            run_id,
            report.session_id,
            report.kind,
            time,
            tracer_levels=report.tracer_levels,
            auto_captured=report.kind is ProfilerSessionKind.SNAPSHOT,
        )
    session = state.session
    hosts = _timed_hosts(state)
    incoming = ProfilerSessionHost(
        host=report.host,
        phase=report.phase,
        start_time=report.start_time,
        end_time=report.end_time,
        file_uri=report.file_uri,
        size_bytes=report.size_bytes,
        error=report.error,
    )
    hosts[report.host] = merge_host(hosts.get(report.host), (incoming, time))
    events: list[uuid.UUID] = list(session.monitored_events)
    if report.workload_event_id is not None and report.workload_event_id not in events:
        events.append(report.workload_event_id)
    durations = [d for d in (session.duration_seconds, report.duration_seconds) if d is not None]
    return settle(
        state,
        hosts,
        duration_seconds=max(durations) if durations else None,
        storage_folder_uri=session.storage_folder_uri
        or report.storage_folder_uri
        or default_folder,
        monitored_events=events,
        operation=session.operation or report.operation,
        prewarmed=session.prewarmed or report.prewarmed,
        # an older report arriving late says when the session really began
        create_time=min(session.create_time, time),
        update_time=max(session.update_time, time),
    )


def fail_hosts(
    state: SessionState, hosts: Iterable[str], error: str, now: datetime
) -> SessionState:
    """``state`` with each of ``hosts`` that is still ACTIVE marked FAILED with ``error``;
    unchanged when there is nothing to mark (hosts the session does not have are ignored)."""
    timed = _timed_hosts(state)
    changed = False
    for name in hosts:
        current = timed.get(name)
        if current is None or current[0].phase is not ProfilerSessionPhase.ACTIVE:
            continue
        host, time = current
        failed = host.model_copy(
            update={"phase": ProfilerSessionPhase.FAILED, "end_time": now, "error": error}
        )
        timed[name] = (failed, max(now, time))
        changed = True
    if not changed:
        return state
    return settle(state, timed, update_time=max(state.session.update_time, now))

"""Merging per-host reports into a session, as pure functions: any order and any number of
repeats give the same session, a finished host never goes back to ACTIVE, and the session's
phase and end follow its hosts."""

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mldiag_run_registry.profiles.merge import SessionState, fail_hosts, merge_report
from mldiag_schemas.profiling import (
    ProfilerSessionKind,
    ProfilerSessionPhase,
    ProfilerSessionReport,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ACTIVE, SUCCEEDED, FAILED = (
    ProfilerSessionPhase.ACTIVE,
    ProfilerSessionPhase.SUCCEEDED,
    ProfilerSessionPhase.FAILED,
)


def report(
    host: str, phase: ProfilerSessionPhase, seconds: float, **fields: Any
) -> ProfilerSessionReport:
    return ProfilerSessionReport(
        session_id="s1",
        host=host,
        phase=phase,
        update_time=T0 + timedelta(seconds=seconds),
        **fields,
    )


def merge_all(
    reports: list[ProfilerSessionReport], state: SessionState | None = None
) -> SessionState:
    for item in reports:
        state = merge_report(
            state,
            item,
            project="p",
            location="l",
            run_id="r1",
            received_at=T0 + timedelta(hours=1),
            default_folder="file:///root/r1/plugins/profile/s1",
        )
    assert state is not None
    return state


def test_a_session_is_created_by_its_first_report() -> None:
    state = merge_all([report("h0", ACTIVE, 0, start_time=T0, kind=ProfilerSessionKind.SNAPSHOT)])
    session = state.session
    assert session.name == "projects/p/locations/l/machineLearningRuns/r1/profilerSessions/s1"
    assert session.kind is ProfilerSessionKind.SNAPSHOT and session.auto_captured
    assert session.phase is ACTIVE and session.end_time is None
    assert session.storage_folder_uri == "file:///root/r1/plugins/profile/s1"
    assert session.create_time == session.update_time == T0
    assert [(h.host, h.phase, h.start_time) for h in session.hosts] == [("h0", ACTIVE, T0)]


def test_any_order_and_repeats_give_the_same_session() -> None:
    event = uuid.uuid4()
    reports = [
        report("h0", ACTIVE, 0, start_time=T0, duration_seconds=2.0),
        report("h1", ACTIVE, 1, start_time=T0),
        report("h0", SUCCEEDED, 5, file_uri="file:///x/h0.xplane.pb", size_bytes=10),
        report("h1", SUCCEEDED, 6, prewarmed=True, workload_event_id=event),
        report("h1", SUCCEEDED, 6, prewarmed=True, workload_event_id=event),
    ]
    sessions = [merge_all(list(order)).session for order in itertools.permutations(reports)]
    first = sessions[0]
    assert all(session == first for session in sessions)
    assert first.phase is SUCCEEDED
    assert first.end_time == T0 + timedelta(seconds=6)  # the last host to finish
    assert first.create_time == T0 and first.update_time == T0 + timedelta(seconds=6)
    assert first.prewarmed and first.monitored_events == [event]
    assert first.duration_seconds == 2.0
    h0 = first.hosts[0]
    assert (h0.host, h0.phase, h0.start_time, h0.size_bytes) == ("h0", SUCCEEDED, T0, 10)


def test_repeating_a_report_changes_nothing() -> None:
    once = merge_all([report("h0", SUCCEEDED, 3)])
    assert merge_all([report("h0", SUCCEEDED, 3)], once) == once


@pytest.mark.parametrize("late", [0.0, -1.0, 5.0])
def test_no_active_report_undoes_a_finished_host(late: float) -> None:
    done = merge_all([report("h0", SUCCEEDED, 5, file_uri="f")])
    after = merge_all([report("h0", ACTIVE, 5 + late)], done)
    assert (after.session.hosts, after.session.phase) == (done.session.hosts, SUCCEEDED)
    assert after.session.end_time == done.session.end_time
    # an older report only says the session began earlier
    assert after.session.create_time == T0 + timedelta(seconds=min(5, 5 + late))
    # in the other order too: at an equal time the finished phase wins
    assert merge_all([report("h0", ACTIVE, 5), report("h0", SUCCEEDED, 5, file_uri="f")]) == done


def test_a_newer_report_wins_and_prewarmed_stays() -> None:
    state = merge_all(
        [report("h0", SUCCEEDED, 5, prewarmed=True), report("h0", FAILED, 9, error="x")]
    )
    assert state.session.hosts[0].phase is FAILED
    assert state.session.prewarmed


def test_phase_is_active_while_any_host_is_then_failed_if_any_failed() -> None:
    state = merge_all([report("h0", FAILED, 1, error="lost"), report("h1", ACTIVE, 2)])
    assert state.session.phase is ACTIVE and state.session.end_time is None
    state = merge_all([report("h1", SUCCEEDED, 3)], state)
    assert state.session.phase is FAILED
    assert state.session.end_time == T0 + timedelta(seconds=3)


def test_a_report_without_a_time_takes_the_receipt_time() -> None:
    state = merge_all([ProfilerSessionReport(session_id="s1", host="h0", phase=SUCCEEDED)])
    assert state.session.update_time == T0 + timedelta(hours=1)
    assert state.host_times == {"h0": T0 + timedelta(hours=1)}


def test_missing_hosts_are_failed_only_while_active() -> None:
    state = merge_all([report("h0", SUCCEEDED, 1), report("h1", ACTIVE, 1)])
    now = T0 + timedelta(seconds=30)
    failed = fail_hosts(state, ["h0", "h1", "nowhere"], "no profile", now)
    by_host = {h.host: h for h in failed.session.hosts}
    assert by_host["h0"].phase is SUCCEEDED
    assert (by_host["h1"].phase, by_host["h1"].error, by_host["h1"].end_time) == (
        FAILED,
        "no profile",
        now,
    )
    assert failed.session.phase is FAILED and failed.session.end_time == now
    assert fail_hosts(failed, ["h1"], "no profile", now) == failed

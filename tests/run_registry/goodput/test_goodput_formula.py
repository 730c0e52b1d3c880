"""The goodput partition, as a pure function: buckets add up to the wall time, none is
negative, and overlapping claims are capped in their documented order."""

import uuid
from datetime import UTC, datetime, timedelta

from mldiag_run_registry.goodput.repository import CompileSplit, ProcessStart, ProcessTotal
from mldiag_run_registry.goodput.service import (
    Inputs,
    Totals,
    compute,
    pick_compile,
    pick_reference,
    pick_start,
)
from mldiag_schemas.events import EventState, EventType, Severity, WorkloadEvent
from mldiag_schemas.goodput import BadputKind, GoodputResponse

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(kind: EventType, lost: float, minute: int = 0) -> WorkloadEvent:
    return WorkloadEvent(
        name=f"runs/r/monitoredEvents/{minute}",
        event_id=uuid.uuid4(),
        run_id="r",
        type=kind,
        display_name=kind.value,
        severity=Severity.WARNING,
        state=EventState.RESOLVED,
        start_time=T0 + timedelta(minutes=minute),
        rule="x",
        time_lost_seconds=lost,
    )


def _inputs(**changes: object) -> Inputs:
    fields: dict[str, object] = {
        "start": T0,
        "end": T0 + timedelta(seconds=1000),
        "first_step_start": T0 + timedelta(seconds=40),
        "steps": Totals(110.5, 11, "process 0"),
        "data_wait": 9.75,
        "checkpoint": 30.0,
        "compile_in_steps": 15.0,
        "events": [_event(EventType.HANG, 200.0, 1), _event(EventType.STRAGGLER, 8.0, 2)],
    }
    fields.update(changes)
    return Inputs(**fields)  # type: ignore[arg-type]


def _seconds(result: GoodputResponse) -> dict[BadputKind, float]:
    return {bucket.kind: bucket.seconds for bucket in result.buckets}


def _total(result: GoodputResponse) -> float:
    return result.productive_seconds + sum(bucket.seconds for bucket in result.buckets)


def test_a_run_splits_into_productive_time_and_every_bucket() -> None:
    result = compute("runs/r", _inputs())
    assert _seconds(result) == {
        BadputKind.STARTUP: 55.0,  # 40 s before the first step + 15 s compiling in it
        BadputKind.DATA_LOADING: 9.75,
        BadputKind.CHECKPOINTING: 30.0,
        BadputKind.DISRUPTIONS: 200.0,
        BadputKind.EVENTS: 8.0,
        BadputKind.UNACCOUNTED: 611.5,  # 1000 - 40 - 110.5 - 30 - 200 - 8
    }
    assert result.productive_seconds == 85.75  # 110.5 - 15 - 9.75
    assert result.goodput == 0.08575
    assert result.wall_seconds == 1000.0 == _total(result)
    assert [(c.bucket, c.seconds) for c in result.events] == [
        (BadputKind.DISRUPTIONS, 200.0),
        (BadputKind.EVENTS, 8.0),
    ]
    fractions = {bucket.kind: bucket.fraction for bucket in result.buckets}
    assert fractions[BadputKind.DISRUPTIONS] == 0.2


def test_claims_beyond_the_gaps_come_out_of_the_steps_then_are_capped() -> None:
    # wall 200: 40 before, 110.5 in steps, 49.5 of gaps. Checkpoint 30 fits the gaps; the
    # hang's 200 takes the 19.5 left and then the 85.75 of productive step time: 105.25.
    result = compute("runs/r", _inputs(end=T0 + timedelta(seconds=200)))
    seconds = _seconds(result)
    assert seconds[BadputKind.CHECKPOINTING] == 30.0
    assert seconds[BadputKind.DISRUPTIONS] == 105.25
    assert seconds[BadputKind.EVENTS] == 0.0
    assert seconds[BadputKind.UNACCOUNTED] == 0.0
    assert result.productive_seconds == 0.0
    assert _total(result) == 200.0
    disruptions = next(b for b in result.buckets if b.kind is BadputKind.DISRUPTIONS)
    assert disruptions.signal_seconds == 200.0  # what the signal claimed, before capping
    assert [c.time_lost_seconds for c in result.events] == [200.0, 8.0]


def test_a_run_without_steps_is_all_startup_and_clocks_never_go_negative() -> None:
    idle = compute("runs/r", _inputs(first_step_start=None, steps=Totals(), events=[]))
    assert _seconds(idle)[BadputKind.STARTUP] == 1000.0
    assert idle.productive_seconds == 0.0 and idle.goodput == 0.0

    # a first step stamped before the run's creation (client clock behind the server's)
    early = compute("runs/r", _inputs(first_step_start=T0 - timedelta(seconds=5), events=[]))
    assert _seconds(early)[BadputKind.STARTUP] == 15.0
    assert _total(early) == 1000.0

    # a run that ends as it starts
    empty = compute("runs/r", _inputs(end=T0))
    assert empty.wall_seconds == 0.0 and empty.goodput == 0.0
    assert all(bucket.seconds == 0.0 and bucket.fraction == 0.0 for bucket in empty.buckets)


def test_the_reference_is_process_zero_or_the_median_process() -> None:
    rows = [
        ProcessTotal("step_time", "h0", 0, 100.0, 10),
        ProcessTotal("step_time", "h1", 1, 300.0, 10),
        ProcessTotal("step_time", "h2", 2, 200.0, 12),
    ]
    assert pick_reference(rows) == Totals(100.0, 10, "process 0")
    assert pick_reference(rows[1:]) == Totals(250.0, 11, "median of 2 processes")
    no_index = [ProcessTotal("step_time", host, None, v, 5) for host, v in (("a", 1), ("b", 9))]
    assert pick_reference([*no_index, ProcessTotal("step_time", "c", None, 4.0, 5)]).seconds == 4.0
    assert pick_reference([]) == Totals()
    assert pick_compile([CompileSplit("h0", 0, 5.0, 15.0), CompileSplit("h1", 1, 9, 9)]) == (
        5.0,
        15.0,
    )
    assert pick_compile([]) == (0.0, 0.0)
    starts = [ProcessStart("h0", 0, 40), ProcessStart("h1", 1, 20), ProcessStart("h2", 2, 30)]
    assert pick_start(starts) == 40
    assert pick_start(starts[1:]) == 20  # the lower median: a start some process had
    assert pick_start([]) is None

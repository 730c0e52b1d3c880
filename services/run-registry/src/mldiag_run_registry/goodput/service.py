"""A run's goodput from its time metrics and its events (no SQL here).

The wall time W (createTime → endTime, or now) is split into productive time and six
buckets of lost time that add up to it exactly (docs/events.md, "Goodput"):

* before the first step, G = first step's start - createTime (all of W without steps);
* inside steps, S = Σ step_time (capped to W - G), which holds the steps' data wait D and
  the compilation recorded after the first step began, K;
* outside steps, the gaps W - G - S.

STARTUP = G + K and DATA_LOADING = D come out of the steps. Checkpoint saves (Σ
checkpoint_time) and each event's time lost are then claimed from the gaps first and, for
what the gaps cannot hold, from the step time left: a checkpoint may block between steps or
inside one, a hang or a slow step inside the step that suffers it. Productive time is the
step time no claim took; UNACCOUNTED the gap time no claim took. A claim that fits nowhere
is not counted (its bucket's ``signalSeconds`` keeps the full figure).

Per metric, one process speaks for the run: process 0 when exactly one process has index
0, otherwise the median of the per-process totals (hosts are never summed).
"""

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import structlog

from mldiag_run_registry.goodput.repository import (
    CompileSplit,
    GoodputRepository,
    ProcessStart,
    ProcessTotal,
)
from mldiag_run_registry.lookup import RunLookup
from mldiag_schemas.events import WorkloadEvent
from mldiag_schemas.goodput import (
    DISRUPTION_TYPES,
    BadputBucket,
    BadputKind,
    EventContribution,
    GoodputResponse,
)
from mldiag_schemas.monitoring import CHECKPOINT_TIME, COMPILE_TIME, DATA_WAIT_TIME, STEP_TIME
from mldiag_schemas.telemetry import from_unix_micros

log = structlog.get_logger(__name__)

_PRECISION = 6  # microseconds: the resolution of stored times


class RunEvents(Protocol):
    """The events of a run as served (time lost merged with their analysis)."""

    async def run_events(self, project: str, location: str, run_id: str) -> list[WorkloadEvent]:
        """Every event of the run, oldest first."""
        ...


@dataclass(frozen=True)
class Totals:
    """The reference process's figures for one metric."""

    seconds: float = 0.0
    count: int = 0
    reference: str = ""


def pick_reference(rows: Sequence[ProcessTotal]) -> Totals:
    """Process 0's totals, or the median over processes."""
    if not rows:
        return Totals()
    zeros = [row for row in rows if row.process_index == 0]
    if len(zeros) == 1:
        return Totals(max(zeros[0].total, 0.0), zeros[0].count, "process 0")
    return Totals(
        max(statistics.median(row.total for row in rows), 0.0),
        round(statistics.median(row.count for row in rows)),
        f"median of {len(rows)} processes",
    )


def pick_start(rows: Sequence[ProcessStart]) -> int | None:
    """Process 0's first step start, or the median (low) over processes; None without."""
    if not rows:
        return None
    zeros = [row for row in rows if row.process_index == 0]
    if len(zeros) == 1:
        return zeros[0].start_us
    return statistics.median_low(row.start_us for row in rows)


def pick_compile(rows: Sequence[CompileSplit]) -> tuple[float, float]:
    """(before, after) of process 0, or the medians over processes."""
    if not rows:
        return 0.0, 0.0
    zeros = [row for row in rows if row.process_index == 0]
    chosen = zeros if len(zeros) == 1 else rows
    return (
        max(statistics.median(row.before for row in chosen), 0.0),
        max(statistics.median(row.after for row in chosen), 0.0),
    )


@dataclass(frozen=True)
class Inputs:
    """Everything the formula reads."""

    start: datetime
    end: datetime
    first_step_start: datetime | None
    steps: Totals
    data_wait: float
    checkpoint: float
    compile_in_steps: float
    events: Sequence[WorkloadEvent]


def compute(run_name: str, inputs: Inputs) -> GoodputResponse:
    """The goodput partition of ``inputs`` (see the module's docstring)."""
    wall = max((inputs.end - inputs.start).total_seconds(), 0.0)
    if inputs.first_step_start is None:
        before = wall
    else:
        before = min(max((inputs.first_step_start - inputs.start).total_seconds(), 0.0), wall)
    in_steps = min(inputs.steps.seconds, wall - before)
    gaps = wall - before - in_steps

    compiling = min(inputs.compile_in_steps, in_steps)
    waiting = min(inputs.data_wait, in_steps - compiling)
    left = in_steps - compiling - waiting

    def claim(seconds: float) -> float:
        nonlocal gaps, left
        from_gaps = min(seconds, gaps)
        from_steps = min(seconds - from_gaps, left)
        gaps -= from_gaps
        left -= from_steps
        return from_gaps + from_steps

    checkpointing = claim(inputs.checkpoint)
    contributions: list[EventContribution] = []
    for event in inputs.events:
        if event.time_lost_seconds <= 0:
            continue
        kind = BadputKind.DISRUPTIONS if event.type in DISRUPTION_TYPES else BadputKind.EVENTS
        contributions.append(
            EventContribution(
                event=event.name,
                type=event.type,
                display_name=event.display_name,
                bucket=kind,
                seconds=round(claim(event.time_lost_seconds), _PRECISION),
                time_lost_seconds=event.time_lost_seconds,
            )
        )

    def lost(kind: BadputKind) -> tuple[float, float]:
        chosen = [c for c in contributions if c.bucket is kind]
        return sum(c.seconds for c in chosen), sum(c.time_lost_seconds for c in chosen)

    def bucket(kind: BadputKind, seconds: float, signal: float) -> BadputBucket:
        seconds = round(max(seconds, 0.0), _PRECISION)
        return BadputBucket(
            kind=kind,
            seconds=seconds,
            fraction=min(round(seconds / wall, _PRECISION), 1.0) if wall else 0.0,
            signal_seconds=round(max(signal, seconds), _PRECISION),
        )

    buckets = [
        bucket(BadputKind.STARTUP, before + compiling, before + inputs.compile_in_steps),
        bucket(BadputKind.DATA_LOADING, waiting, inputs.data_wait),
        bucket(BadputKind.CHECKPOINTING, checkpointing, inputs.checkpoint),
        bucket(BadputKind.DISRUPTIONS, *lost(BadputKind.DISRUPTIONS)),
        bucket(BadputKind.EVENTS, *lost(BadputKind.EVENTS)),
        bucket(BadputKind.UNACCOUNTED, gaps, gaps),
    ]
    productive = round(max(left, 0.0), _PRECISION)
    return GoodputResponse(
        run=run_name,
        start_time=inputs.start,
        end_time=inputs.end,
        wall_seconds=round(wall, _PRECISION),
        productive_seconds=productive,
        goodput=min(round(productive / wall, _PRECISION), 1.0) if wall else 0.0,
        step_seconds=round(inputs.steps.seconds, _PRECISION),
        steps=inputs.steps.count,
        first_step_start_time=inputs.first_step_start,
        reference=inputs.steps.reference,
        buckets=buckets,
        events=contributions,
    )


class GoodputService:
    """Goodput of one run."""

    def __init__(
        self,
        repository: GoodputRepository,
        runs: RunLookup,
        events: RunEvents,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._repository = repository
        self._runs = runs
        self._events = events
        self._clock = clock

    async def goodput(self, project: str, location: str, run_id: str) -> GoodputResponse:
        """The run's goodput now (an active run's wall time runs to the present)."""
        run = await self._runs.get_run(project, location, run_id)
        totals = await self._repository.process_totals(
            run_id, (STEP_TIME, DATA_WAIT_TIME, CHECKPOINT_TIME)
        )

        def of(metric: str) -> Totals:
            return pick_reference([row for row in totals if row.metric == metric])

        first_us = pick_start(await self._repository.first_step_starts(project, run_id, STEP_TIME))
        compile_after = 0.0  # without steps, all compilation is before the first step
        if first_us is not None:
            # Compilation before the first step began is inside "before the first step".
            _, compile_after = pick_compile(
                await self._repository.compile_split(project, run_id, COMPILE_TIME, first_us)
            )
        end = run.end_time or self._clock()
        inputs = Inputs(
            start=run.create_time,
            end=max(end, run.create_time),
            first_step_start=from_unix_micros(first_us) if first_us is not None else None,
            steps=of(STEP_TIME),
            data_wait=of(DATA_WAIT_TIME).seconds,
            checkpoint=of(CHECKPOINT_TIME).seconds,
            compile_in_steps=compile_after,
            events=await self._events.run_events(project, location, run_id),
        )
        result = compute(run.name, inputs)
        log.info(
            "goodput.computed",
            run_id=run_id,
            wall_s=result.wall_seconds,
            goodput=result.goodput,
            reference=result.reference,
        )
        return result

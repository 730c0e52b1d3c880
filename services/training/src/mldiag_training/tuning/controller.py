"""The tuning controller: runs each study's trials as custom jobs, one writer per study.

Every change to a study happens in a unit of work that holds its row (``FOR UPDATE``); an
in-process lock per study keeps this process's own callers (bus facts, the tick, the API's
nudges) in line before they reach the database. The search (Optuna, in memory) is a cache
of the trials table, rebuilt when the row's revision is not the one it was built at.

Exactly once: a trial's row, with its custom job's id chosen up front, commits before the
job is created; ``JobsService.create(job_id=…)`` is idempotent, and every pass creates the
jobs of trials that have none yet (a crash between the two is mended at the next pass).

A trial's job ending frees its slot at once (the next trial is created in the same pass);
the trial itself is finalised once the metrics consumer has read past the last metric point
its run had sent by then (:class:`MetricsFloor`), or after a grace period.

What one pass decides is :class:`study.StudyPass`'s; a trial's job and the search's history
are :mod:`trials`'. No SQL and no bus here: the repository and the bus doors (handlers.py)
are passed in.
"""

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import structlog

from mldiag_platform.errors import MldiagError
from mldiag_schemas.jobs import (
    TERMINAL_JOB_STATES,
    CustomJob,
    CustomJobSpec,
    JobState,
    RpcStatus,
)
from mldiag_schemas.replicas import CustomJobStateChanged
from mldiag_schemas.telemetry import MetricPointsReceived
from mldiag_schemas.tuning import (
    TERMINAL_TRIAL_STATES,
    StudySpec,
    TrialOfJob,
    TrialState,
)
from mldiag_training.jobs.errors import JobNotCancellable
from mldiag_training.jobs.service import SchedulerHooks
from mldiag_training.jobs.validation import MachineResolver, check_machines
from mldiag_training.tuning.measurements import (
    MetricPoint,
    merge,
)
from mldiag_training.tuning.repository import (
    StudyRow,
    StudyUnit,
    TrialRow,
    TuningRepository,
)
from mldiag_training.tuning.search import Search
from mldiag_training.tuning.study import FAILED_CODE, StudyPass
from mldiag_training.tuning.trials import (
    find_trial,
    history,
    metric_points,
    objective,
    objective_step,
    trial_custom_job,
)
from mldiag_training.tuning.validation import as_trial_spec_error

log = structlog.get_logger(__name__)

NEGATIVE_CACHE_SIZE = 10_000
"""Runs (and jobs) remembered as not being trials, so their facts cost no lookup."""


class JobsPort(Protocol):
    """What the controller asks of the custom-jobs service."""

    async def create(
        self,
        project: str,
        location: str,
        body: CustomJob,
        *,
        job_id: str | None = None,
        run_set: str | None = None,
        trial: TrialOfJob | None = None,
    ) -> CustomJob:
        """Create a job (idempotent with ``job_id``)."""
        ...

    async def cancel(self, project: str, location: str, job_id: str) -> None:
        """Cancel a job (JobNotCancellable once it has ended)."""
        ...


class MetricsFloor(Protocol):
    """Where the trials' metrics consumer stands in the TELEMETRY stream."""

    async def last_sequence(self, run_id: str) -> int | None:
        """The stream sequence of the run's last metric points (None: it has sent none)."""
        ...

    async def processed_through(self) -> int:
        """The highest sequence below which the metrics consumer has settled everything."""
        ...


class Flusher(Protocol):
    """Publishes staged facts after commit."""

    async def flush(self) -> int:
        """Publish what is staged."""
        ...


@dataclass(frozen=True)
class TrialRef:
    """Which study and trial a custom job (and its run) belongs to."""

    tuning_job_id: str
    number: int
    start_time: datetime


class _LRUSet:
    """A bounded set of recently seen keys."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def add(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)


class TuningController:
    """Drives every study of this installation (see the module's docstring)."""

    def __init__(
        self,
        repository: TuningRepository,
        flusher: Flusher,
        jobs: JobsPort,
        scheduler: SchedulerHooks,
        machines: MachineResolver,
        *,
        tick_seconds: float = 1.0,
        metrics_grace_seconds: float = 5.0,
        unread_metrics_seconds: float = 35.0,
    ) -> None:
        self._repository = repository
        self._flusher = flusher
        self._jobs = jobs
        self._scheduler = scheduler
        self._machines = machines
        self.tick_seconds = tick_seconds
        self.grace = timedelta(seconds=metrics_grace_seconds)
        self.unread_limit = timedelta(seconds=unread_metrics_seconds)
        self.floor: MetricsFloor | None = None
        self._locks: dict[str, asyncio.Lock] = {}
        self._searches: dict[str, tuple[int, Search]] = {}
        self._specs: dict[str, StudySpec] = {}
        self._trials: OrderedDict[str, TrialRef] = OrderedDict()
        self._not_trials = _LRUSet(NEGATIVE_CACHE_SIZE)
        self._nudged: set[str] = set()
        self._creating: set[str] = set()
        """Trials' custom jobs being created now (another pass need not create them too)."""
        self._wake = asyncio.Event()

    # -- the API's hooks

    async def check_trial_spec(self, spec: CustomJobSpec) -> None:
        """Refuse a trial spec no trial could run: an unknown machine type (naming the
        field under ``trialJobSpec``), or one no executor seen lately could fit."""
        try:
            check_machines(spec, self._machines)
        except MldiagError as error:
            raise as_trial_spec_error(error) from None
        await self._scheduler.refuse_unfittable(spec)

    def nudge(self, job_id: str) -> None:
        """Look at a study at the next turn of the loop (not waiting for the tick)."""
        self._nudged.add(job_id)
        self._wake.set()

    # -- the loop

    async def run_forever(self) -> None:
        """Advance nudged studies as they come, and every study each tick."""
        next_tick = 0.0
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            try:
                if now >= next_tick:
                    next_tick = now + self.tick_seconds
                    self._nudged.clear()
                    await self.tick()
                while self._nudged:
                    await self.advance(self._nudged.pop())
            except asyncio.CancelledError:
                raise
            except Exception:  # a failing pass is retried at the next tick, never fatal
                log.exception("tuning.tick_failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, next_tick - loop.time()))

    async def tick(self) -> None:
        """One pass over every study that has not ended (also the reconcile at start)."""
        for job_id in await self._repository.active():
            try:
                await self.advance(job_id)
            except Exception:  # one broken study must not stop the others
                log.exception("tuning.advance_failed", job_id=job_id)

    # -- bus facts

    async def job_state_changed(self, message: CustomJobStateChanged) -> None:
        """A custom job changed state: if it ended and runs a trial, free the trial's slot
        (the next trial is created now) and finalise the trial once its metrics are in."""
        if message.state not in TERMINAL_JOB_STATES:
            return
        ref = await self._trial_ref(message.job_id)
        if ref is None:
            return
        sequence = await self._last_sequence(message.job_id)
        error = message.error.message if message.error else None

        async def record(unit: StudyUnit, _search: Search) -> None:
            trial = find_trial(unit, ref.number)
            if trial is None or trial.job_state is not None:
                return
            await unit.save_trial(
                replace(
                    trial,
                    job_state=message.state,
                    job_error=error,
                    job_end_time=datetime.now(UTC),
                    metrics_sequence=sequence,
                )
            )

        await self.advance(ref.tuning_job_id, record)

    async def metrics_received(self, messages: Sequence[MetricPointsReceived]) -> None:
        """Turn the trials' metric points into measurements; report each new objective
        value to median stopping (a trial it stops goes STOPPING, its job cancelled)."""
        by_run: dict[str, list[MetricPointsReceived]] = {}
        for message in messages:
            if message.run_id not in self._not_trials:
                by_run.setdefault(message.run_id, []).append(message)
        for run_id, received in by_run.items():
            ref = await self._trial_ref(run_id)
            if ref is None:
                continue
            spec = self._specs.get(ref.tuning_job_id)
            if spec is None:
                await self.advance(ref.tuning_job_id)  # loads (and caches) the spec
                spec = self._specs.get(ref.tuning_job_id)
                if spec is None:
                    continue
            points = list(metric_points(received, spec, ref.start_time))
            if points:
                await self.advance(ref.tuning_job_id, self._measure(ref.number, spec, points))

    def _measure(
        self, number: int, spec: StudySpec, points: list[MetricPoint]
    ) -> Callable[[StudyUnit, Search], Awaitable[None]]:
        metric_ids = [m.metric_id for m in spec.metrics]

        async def apply(unit: StudyUnit, search: Search) -> None:
            trial = find_trial(unit, number)
            if trial is None or trial.state in TERMINAL_TRIAL_STATES:
                return
            before = {m.step_count: m for m in trial.measurements}
            merged = merge(trial.measurements, points, metric_ids)
            if merged == trial.measurements:
                return
            state = trial.state
            changed_steps = {p.step for p in points}
            for measurement in merged:
                if measurement.step_count not in changed_steps:
                    continue
                if before.get(measurement.step_count) == measurement:
                    continue
                value = objective(measurement, spec)
                if value is None:
                    continue
                # Recorded even once the job has ended (points can trail its end): the
                # median of later trials counts it. Only a running trial is stopped.
                stop = search.report(number, objective_step(measurement, spec), value)
                if stop and state is TrialState.ACTIVE and trial.job_state is None:
                    state = TrialState.STOPPING
                    log.info(
                        "tuning.trial.stopping",
                        job_id=unit.study.job_id,
                        trial=trial.trial_id,
                        step=measurement.step_count,
                        value=value,
                    )
            await unit.save_trial(replace(trial, measurements=merged, state=state))

        return apply

    # -- one study

    async def advance(
        self,
        job_id: str,
        before: Callable[[StudyUnit, Search], Awaitable[None]] | None = None,
    ) -> None:
        """One unit of work on a study: apply ``before`` (a fact), finalise trials whose
        jobs ended, decide the study's state, suggest trials into free slots; after commit,
        publish the facts, create the new trials' jobs and send the cancels."""
        lock = self._locks.setdefault(job_id, asyncio.Lock())
        async with lock:
            try:
                pending = await self._unit_of_work(job_id, before)
            except BaseException:
                self._searches.pop(job_id, None)  # it may hold what was rolled back
                raise
        await self._flusher.flush()
        # Outside the lock: both are idempotent, and a refused create records the trial's
        # end through another unit of work.
        if pending is not None:
            await self._side_effects(*pending)

    async def _unit_of_work(
        self,
        job_id: str,
        before: Callable[[StudyUnit, Search], Awaitable[None]] | None,
    ) -> tuple[StudyRow, list[TrialRow]] | None:
        async with self._repository.study(job_id) as unit:
            if unit is None:
                self._forget(job_id)
                return None
            study = unit.study
            self._specs[job_id] = study.job.study_spec
            if study.job.state in TERMINAL_JOB_STATES:
                self._forget(job_id)
                return None
            search = self._search(unit)
            if before is not None:
                await before(unit, search)
            await StudyPass(unit, search, self.metrics_floor, self.grace, self.unread_limit).run()
        if unit.dirty:
            self._searches[job_id] = (unit.study.revision, search)
        if unit.study.job.state in TERMINAL_JOB_STATES:
            self._forget(job_id)
        return unit.study, unit.trials

    def _search(self, unit: StudyUnit) -> Search:
        cached = self._searches.get(unit.study.job_id)
        if cached is not None and cached[0] == unit.study.revision:
            return cached[1]
        spec = unit.study.job.study_spec
        search = Search(spec, unit.study.seed, history(unit.trials, spec))
        self._searches[unit.study.job_id] = (unit.study.revision, search)
        return search

    def _forget(self, job_id: str) -> None:
        self._searches.pop(job_id, None)
        self._specs.pop(job_id, None)
        self._locks.pop(job_id, None)  # an ended study is looked at no more

    async def _side_effects(self, study: StudyRow, trials: list[TrialRow]) -> None:
        for trial in trials:
            if trial.state in TERMINAL_TRIAL_STATES or trial.job_state is not None:
                continue
            if not trial.job_created and trial.custom_job_id not in self._creating:
                self._creating.add(trial.custom_job_id)
                try:
                    await self._create_job(study, trial)
                finally:
                    self._creating.discard(trial.custom_job_id)
            elif trial.state is TrialState.STOPPING and not trial.cancel_sent:
                await self._cancel_job(study, trial)

    async def _create_job(self, study: StudyRow, trial: TrialRow) -> None:
        body = trial_custom_job(study, trial)
        of_job = TrialOfJob(
            tuning_job_id=study.job_id,
            study_display_name=study.job.display_name,
            trial_id=trial.trial_id,
            parameters=trial.parameter_values,
        )
        try:
            await self._jobs.create(
                study.project,
                study.location,
                body,
                job_id=trial.custom_job_id,
                run_set=study.job.display_name,
                trial=of_job,
            )
        except MldiagError as error:  # e.g. no executor can fit it any more
            log.warning(
                "tuning.trial.create_refused",
                job_id=study.job_id,
                trial=trial.trial_id,
                error=error.message,
            )
            await self.job_state_changed(
                CustomJobStateChanged(
                    job_id=trial.custom_job_id,
                    project=study.project,
                    location=study.location,
                    previous_state=JobState.QUEUED,
                    state=JobState.FAILED,
                    error=RpcStatus(code=FAILED_CODE, message=error.message),
                )
            )
            return
        self._remember(trial.custom_job_id, study.job_id, trial)
        await self._repository.mark_trial(study.job_id, trial.number, job_created=True)
        log.info(
            "tuning.trial.created",
            job_id=study.job_id,
            trial=trial.trial_id,
            custom_job=trial.custom_job_id,
        )

    async def _cancel_job(self, study: StudyRow, trial: TrialRow) -> None:
        with contextlib.suppress(JobNotCancellable):  # it ended meanwhile: nothing to stop
            await self._jobs.cancel(study.project, study.location, trial.custom_job_id)
        await self._repository.mark_trial(study.job_id, trial.number, cancel_sent=True)

    # -- lookups

    def _remember(self, custom_job_id: str, job_id: str, trial: TrialRow) -> None:
        self._trials[custom_job_id] = TrialRef(job_id, trial.number, trial.start_time)
        while len(self._trials) > NEGATIVE_CACHE_SIZE:
            self._trials.popitem(last=False)

    async def _trial_ref(self, custom_job_id: str) -> TrialRef | None:
        if custom_job_id in self._not_trials:
            return None
        ref = self._trials.get(custom_job_id)
        if ref is not None:
            return ref
        found = await self._repository.trial_of(custom_job_id)
        if found is None:
            self._not_trials.add(custom_job_id)
            return None
        ref = TrialRef(*found)
        self._trials[custom_job_id] = ref
        return ref

    async def _last_sequence(self, run_id: str) -> int | None:
        if self.floor is None:
            return None
        try:
            return await self.floor.last_sequence(run_id)
        except Exception:  # the grace period finalises the trial anyway
            log.warning("tuning.metrics_sequence_unavailable", run_id=run_id, exc_info=True)
            return None

    async def metrics_floor(self) -> int | None:
        """The metrics consumer's floor, None when it cannot be read."""
        if self.floor is None:
            return None
        try:
            return await self.floor.processed_through()
        except Exception:
            log.warning("tuning.metrics_floor_unavailable", exc_info=True)
            return None

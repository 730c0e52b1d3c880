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

No SQL and no bus here: the repository and the bus doors (handlers.py) are passed in.
"""

import asyncio
import contextlib
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import structlog

from mldiag_platform.errors import MldiagError
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import (
    TERMINAL_JOB_STATES,
    CustomJob,
    CustomJobSpec,
    EnvVar,
    GcsDestination,
    JobState,
    RpcStatus,
    WorkerPoolSpec,
)
from mldiag_schemas.replicas import CustomJobStateChanged
from mldiag_schemas.telemetry import MetricPointsReceived
from mldiag_schemas.tuning import (
    TERMINAL_TRIAL_STATES,
    HyperparameterTuningJob,
    Measurement,
    StudySpec,
    TrialEnded,
    TrialOfJob,
    TrialParameter,
    TrialState,
    TuningJobStateChanged,
)
from mldiag_training.jobs.errors import JobNotCancellable
from mldiag_training.jobs.service import SchedulerHooks, new_job_id
from mldiag_training.jobs.validation import MachineResolver, check_machines
from mldiag_training.tuning.measurements import (
    MetricPoint,
    final_measurement,
    merge,
    objective_values,
)
from mldiag_training.tuning.repository import (
    StudyRow,
    StudyUnit,
    TrialRow,
    TuningRepository,
    to_trial,
)
from mldiag_training.tuning.search import Search, TrialRecord, TrialRecordState, argument
from mldiag_training.tuning.validation import as_trial_spec_error

log = structlog.get_logger(__name__)

TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"
"""The environment variable carrying a trial's id into every replica (as on Vertex)."""
TUNING_JOB_LABEL = "mldiag-tuning-job"
"""The label naming a trial's tuning job on its custom job."""
TRIAL_LABEL = "mldiag-trial"
"""The label naming a trial's id on its custom job."""

CANCELLED_CODE = 1
FAILED_CODE = 9  # FAILED_PRECONDITION, as Vertex fails a study whose trials failed
NEGATIVE_CACHE_SIZE = 10_000
"""Runs (and jobs) remembered as not being trials, so their facts cost no lookup."""

ACTIVE_TRIAL_STATES = frozenset({TrialState.REQUESTED, TrialState.ACTIVE, TrialState.STOPPING})


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


def failed_trial_limit(job: HyperparameterTuningJob) -> int:
    """INFEASIBLE trials that fail the study (``maxFailedTrialCount``; 0: half the trials,
    at least one)."""
    if job.max_failed_trial_count > 0:
        return job.max_failed_trial_count
    return max(1, math.ceil(job.max_trial_count / 2))


def trial_custom_job(study: StudyRow, trial: TrialRow) -> CustomJob:
    """The custom job of a trial: ``trialJobSpec`` with the parameters appended to every
    pool's args, ``CLOUD_ML_TRIAL_ID`` in every pool's env, the outputs under
    ``<base>/<trial id>/``, and labels naming the study and the trial."""
    job = study.job
    spec = job.trial_job_spec
    args = [argument(p.parameter_id, p.value) for p in trial.parameters]
    trial_env = EnvVar(name=TRIAL_ID_ENV, value=trial.trial_id)
    pools: list[WorkerPoolSpec] = []
    for pool in spec.worker_pool_specs:
        if pool.empty:
            pools.append(pool)
        elif pool.container_spec is not None:
            task = pool.container_spec
            env = [*(e for e in task.env if e.name != TRIAL_ID_ENV), trial_env]
            task = task.model_copy(update={"args": [*task.args, *args], "env": env})
            pools.append(pool.model_copy(update={"container_spec": task}))
        elif pool.python_package_spec is not None:
            package = pool.python_package_spec
            env = [*(e for e in package.env if e.name != TRIAL_ID_ENV), trial_env]
            package = package.model_copy(update={"args": [*package.args, *args], "env": env})
            pools.append(pool.model_copy(update={"python_package_spec": package}))
        else:
            pools.append(pool)
    update: dict[str, object] = {"worker_pool_specs": pools}
    if spec.base_output_directory is not None:
        prefix = spec.base_output_directory.output_uri_prefix.rstrip("/")
        update["base_output_directory"] = GcsDestination(
            output_uri_prefix=f"{prefix}/{trial.trial_id}/"
        )
    suffix = f" trial {trial.trial_id}"
    return CustomJob(
        display_name=job.display_name[: 128 - len(suffix)] + suffix,
        job_spec=spec.model_copy(update=update),
        labels={**job.labels, TUNING_JOB_LABEL: study.job_id, TRIAL_LABEL: trial.trial_id},
    )


def _record_state(trial: TrialRow) -> TrialRecordState:
    if trial.state is TrialState.SUCCEEDED:
        return "stopped" if trial.stopped_early else "succeeded"
    if trial.state is TrialState.INFEASIBLE:
        return "infeasible"
    return "active"


def _objective_step(measurement: Measurement, spec: StudySpec) -> int:
    """Where median stopping compares a measurement: its step, or its elapsed seconds."""
    stopping = spec.median_automated_stopping_spec
    if stopping is not None and stopping.use_elapsed_duration:
        return int(measurement.elapsed_duration or 0)
    return measurement.step_count


def _objective(measurement: Measurement, spec: StudySpec) -> float | None:
    metric = spec.metrics[0].metric_id
    return next((m.value for m in measurement.metrics if m.metric_id == metric), None)


def history(trials: Sequence[TrialRow], spec: StudySpec) -> list[TrialRecord]:
    """The trials as the search is rebuilt from them."""
    records = []
    for trial in sorted(trials, key=lambda t: t.number):
        values = None
        if trial.state is TrialState.SUCCEEDED and trial.final_measurement is not None:
            try:
                values = objective_values(trial.final_measurement, spec)
            except KeyError:
                values = None
        intermediate: dict[int, float] = {}
        if len(spec.metrics) == 1:
            for measurement in trial.measurements:
                value = _objective(measurement, spec)
                if value is not None:
                    intermediate[_objective_step(measurement, spec)] = value
        records.append(
            TrialRecord(
                number=trial.number,
                parameters=trial.parameter_values,
                state=_record_state(trial),
                values=values,
                intermediate=intermediate,
            )
        )
    return records


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
    ) -> None:
        self._repository = repository
        self._flusher = flusher
        self._jobs = jobs
        self._scheduler = scheduler
        self._machines = machines
        self.tick_seconds = tick_seconds
        self.grace = timedelta(seconds=metrics_grace_seconds)
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
            trial = _find(unit, ref.number)
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
            points = list(_points(received, spec, ref.start_time))
            if points:
                await self.advance(ref.tuning_job_id, self._measure(ref.number, spec, points))

    def _measure(
        self, number: int, spec: StudySpec, points: list[MetricPoint]
    ) -> Callable[[StudyUnit, Search], Awaitable[None]]:
        metric_ids = [m.metric_id for m in spec.metrics]

        async def apply(unit: StudyUnit, search: Search) -> None:
            trial = _find(unit, number)
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
                value = _objective(measurement, spec)
                if value is None:
                    continue
                # Recorded even once the job has ended (points can trail its end): the
                # median of later trials counts it. Only a running trial is stopped.
                stop = search.report(number, _objective_step(measurement, spec), value)
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
            await _Pass(self, unit, search).run()
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


def _find(unit: StudyUnit, number: int) -> TrialRow | None:
    return next((t for t in unit.trials if t.number == number), None)


def _points(
    messages: Sequence[MetricPointsReceived], spec: StudySpec, start: datetime
) -> list[MetricPoint]:
    """The finite points of the study's metrics, with seconds since the trial started."""
    wanted = {m.metric_id for m in spec.metrics}
    start_us = start.timestamp() * 1e6
    points: list[MetricPoint] = []
    for message in messages:
        received_us = message.occurred_at.timestamp() * 1e6
        for columns in message.series:
            if columns.name not in wanted:
                continue
            times = columns.times_unix_us
            for index, (step, value) in enumerate(zip(columns.steps, columns.values, strict=True)):
                if not math.isfinite(value):
                    continue  # NaN cannot be stored (jsonb) nor compared
                at = times[index] if times is not None else received_us
                points.append(
                    MetricPoint(columns.name, step, value, max(0.0, (at - start_us) / 1e6))
                )
    return points


class _Pass:
    """One pass of the controller over a held study (see :meth:`TuningController.advance`)."""

    def __init__(self, controller: TuningController, unit: StudyUnit, search: Search) -> None:
        self._controller = controller
        self._unit = unit
        self._search = search
        self._now = datetime.now(UTC)
        self._facts: list[Envelope] = []

    @property
    def _study(self) -> StudyRow:
        return self._unit.study

    @property
    def _spec(self) -> StudySpec:
        return self._unit.study.job.study_spec

    async def run(self) -> None:
        """Finalise, decide, suggest; stage the facts."""
        if await self._finalise_ended():
            await self._judge_running()
        await self._update_best()
        await self._decide()
        await self._unit.stage(self._facts)

    # -- finalising trials

    async def _finalise_ended(self) -> bool:
        """Finalise the trials whose jobs ended and whose points are in; whether any was."""
        waiting = [
            t
            for t in self._unit.trials
            if t.state not in TERMINAL_TRIAL_STATES and t.job_state is not None
        ]
        finalised = False
        if not waiting:
            return finalised
        floor = None
        if any(t.metrics_sequence for t in waiting):
            floor = await self._controller.metrics_floor()
        for trial in waiting:
            sequence = trial.metrics_sequence
            read = not sequence or (floor is not None and floor >= sequence)
            # Points of a trial that reported nothing yet may still be on their way (the
            # launcher's last forward races the replica's exit): give them the grace too.
            hopeful = read and final_measurement(trial.measurements, self._spec) is None
            in_grace = (
                trial.job_end_time is not None
                and self._now - trial.job_end_time < self._controller.grace
            )
            if (not read or hopeful) and in_grace:
                continue
            if not read:
                log.warning(
                    "tuning.trial.finalised_before_metrics",
                    job_id=self._study.job_id,
                    trial=trial.trial_id,
                    sequence=sequence,
                    floor=floor,
                )
            await self._finalise(trial)
            finalised = True
        return finalised

    async def _judge_running(self) -> None:
        """A trial ended, so the median moved: judge each running trial's latest objective
        again (it may report no further step before it ends)."""
        spec = self._spec
        if spec.median_automated_stopping_spec is None:
            return
        for trial in self._running():
            if trial.state is not TrialState.ACTIVE:
                continue
            latest = next(
                (m for m in reversed(trial.measurements) if _objective(m, spec) is not None),
                None,
            )
            value = _objective(latest, spec) if latest is not None else None
            if latest is None or value is None:
                continue
            if self._search.report(trial.number, _objective_step(latest, spec), value):
                await self._unit.save_trial(replace(trial, state=TrialState.STOPPING))
                log.info(
                    "tuning.trial.stopping",
                    job_id=self._study.job_id,
                    trial=trial.trial_id,
                    step=latest.step_count,
                    value=value,
                )

    async def _finalise(self, trial: TrialRow) -> None:
        spec = self._spec
        final = final_measurement(trial.measurements, spec)
        stopped = trial.state is TrialState.STOPPING
        reason = ""
        if trial.job_state is JobState.SUCCEEDED or stopped:  # stopped: by the controller
            if final is None:
                metrics = ", ".join(repr(m.metric_id) for m in spec.metrics)
                reason = f"no objective metric reported: {metrics}"
        elif trial.job_state is JobState.CANCELLED:
            reason = "its custom job was cancelled"
        else:
            reason = f"its custom job failed: {trial.job_error or trial.job_state}"
        values = None
        if not reason and final is not None:
            values = objective_values(final, spec)
        state = TrialState.INFEASIBLE if reason else TrialState.SUCCEEDED
        ended = replace(
            trial,
            state=state,
            final_measurement=None if reason else final,
            infeasible_reason=reason,
            stopped_early=stopped and not reason,
            end_time=self._now,
        )
        self._search.tell(trial.number, values, stopped=ended.stopped_early)
        await self._unit.save_trial(ended)
        study = self._study
        self._facts.append(
            TrialEnded(
                tuning_job_id=study.job_id,
                trial_job_id=trial.custom_job_id,
                trial=to_trial(study.project, study.location, study.job_id, ended),
                stopped_early=ended.stopped_early,
            )
        )
        log.info(
            "tuning.trial.ended",
            job_id=study.job_id,
            trial=trial.trial_id,
            state=state.value,
            reason=reason or None,
            stopped_early=ended.stopped_early,
        )

    async def _update_best(self) -> None:
        best = self._search.best()
        number = best[0] if len(self._spec.metrics) == 1 and best else None
        study = self._study
        if number is None or number == study.best_trial:
            return
        ended = sum(1 for t in self._unit.trials if t.state in TERMINAL_TRIAL_STATES)
        study = replace(study, best_trial=number, progress_time=self._now, progress_trials=ended)
        await self._unit.save_study(study)
        self._facts.append(self._changed(study.job.state, study.job.state))

    # -- the study's state

    def _counts(self) -> tuple[int, int]:
        trials = self._unit.trials
        succeeded = sum(1 for t in trials if t.state is TrialState.SUCCEEDED)
        infeasible = sum(1 for t in trials if t.state is TrialState.INFEASIBLE)
        return succeeded, infeasible

    def _changed(self, previous: JobState, state: JobState) -> TuningJobStateChanged:
        study = self._study
        succeeded, infeasible = self._counts()
        best = _find(self._unit, study.best_trial) if study.best_trial is not None else None
        return TuningJobStateChanged(
            job_id=study.job_id,
            project=study.project,
            location=study.location,
            previous_state=previous,
            state=state,
            error=study.job.error,
            best_trial=to_trial(study.project, study.location, study.job_id, best)
            if best
            else None,
            trials_succeeded=succeeded,
            trials_infeasible=infeasible,
        )

    async def _set_state(self, state: JobState, error: RpcStatus | None = None) -> None:
        study = self._study
        previous = study.job.state
        update: dict[str, object] = {"state": state, "update_time": self._now}
        if error is not None:
            update["error"] = error
        if state is JobState.RUNNING and study.job.start_time is None:
            update["start_time"] = self._now
        if state in TERMINAL_JOB_STATES:
            update["end_time"] = self._now
        await self._unit.save_study(replace(study, job=study.job.model_copy(update=update)))
        self._facts.append(self._changed(previous, state))
        log.info("tuning.state", job_id=study.job_id, previous=previous.value, state=state.value)

    async def _stop_running(self) -> None:
        """Ask every trial whose job still runs to stop (its job is cancelled after commit)."""
        for trial in self._running():
            if trial.state is not TrialState.STOPPING:
                await self._unit.save_trial(replace(trial, state=TrialState.STOPPING))

    def _running(self) -> list[TrialRow]:
        return [
            t for t in self._unit.trials if t.state in ACTIVE_TRIAL_STATES and t.job_state is None
        ]

    def _unfinished(self) -> list[TrialRow]:
        return [t for t in self._unit.trials if t.state not in TERMINAL_TRIAL_STATES]

    async def _decide(self) -> None:
        study = self._study
        job = study.job
        if study.cancel_requested or job.state is JobState.CANCELLING:
            await self._stop_running()
            if not self._unfinished():
                error = RpcStatus(code=CANCELLED_CODE, message="The tuning job was cancelled.")
                await self._set_state(JobState.CANCELLED, error)
            return
        succeeded, infeasible = self._counts()
        limit = failed_trial_limit(job)
        if infeasible >= limit and not (study.stop_reason or "").startswith("failed:"):
            last = next(
                (t for t in reversed(self._unit.trials) if t.state is TrialState.INFEASIBLE),
                None,
            )
            why = f": the last because {last.infeasible_reason}" if last else ""
            reason = f"failed: {infeasible} trials were infeasible (the limit is {limit}){why}"
            study = replace(study, stop_reason=reason)
            await self._unit.save_study(study)
            await self._stop_running()
        if study.stop_reason is None:
            rule = self._stopping_rule(succeeded + infeasible)
            if rule is not None:
                study = replace(study, stop_reason=rule)
                await self._unit.save_study(study)
                log.info("tuning.stopping_rule", job_id=study.job_id, rule=rule)
                config = job.study_spec.study_stopping_config
                if config is not None and config.should_stop_asap:
                    await self._stop_running()
        if study.stop_reason is None:
            await self._suggest()
            study = self._study
        if self._unfinished():
            return
        if study.stop_reason is None and len(self._unit.trials) < self._cap():
            return  # nothing runs, more may come (a refused create, say): next pass
        await self._end(study.stop_reason)

    def _cap(self) -> int:
        job = self._study.job
        config = job.study_spec.study_stopping_config
        cap = job.max_trial_count
        if config is not None and config.max_num_trials is not None:
            cap = min(cap, config.max_num_trials)
        return cap

    def _stopping_rule(self, ended: int) -> str | None:
        """The studyStoppingConfig rule that fires now, if any."""
        job = self._study.job
        config = job.study_spec.study_stopping_config
        if config is None or job.start_time is None:
            return None
        elapsed = (self._now - job.start_time).total_seconds()
        most = config.maximum_runtime_constraint
        if most is not None:
            if most.max_duration is not None and elapsed >= most.max_duration:
                return "maximum_runtime_constraint: maxDuration passed"
            if most.end_time is not None and self._now >= most.end_time:
                return "maximum_runtime_constraint: endTime passed"
        if not self._rules_armed(ended, elapsed):
            return None
        study = self._study
        rules: list[tuple[bool, str]] = []
        if config.max_num_trials is not None:
            rules.append(
                (
                    len(self._unit.trials) >= config.max_num_trials,
                    f"max_num_trials: {config.max_num_trials} trials ran",
                )
            )
        no_progress = config.max_num_trials_no_progress
        if no_progress is not None:
            rules.append(
                (
                    ended - study.progress_trials >= no_progress,
                    f"max_num_trials_no_progress: {no_progress} trials without a better value",
                )
            )
        quiet = config.max_duration_no_progress
        if quiet is not None:
            since = study.progress_time or job.start_time
            rules.append(
                (
                    (self._now - since).total_seconds() >= quiet,
                    f"max_duration_no_progress: {quiet:g}s without a better value",
                )
            )
        return next((reason for fired, reason in rules if fired), None)

    def _rules_armed(self, ended: int, elapsed: float) -> bool:
        """Whether min_num_trials and minimum_runtime_constraint let the rules fire."""
        config = self._study.job.study_spec.study_stopping_config
        if config is None:
            return False
        if config.min_num_trials is not None and ended < config.min_num_trials:
            return False
        least = config.minimum_runtime_constraint
        if least is not None:
            if least.max_duration is not None and elapsed < least.max_duration:
                return False
            if least.end_time is not None and self._now < least.end_time:
                return False
        return True

    async def _suggest(self) -> None:
        job = self._study.job
        running = len(self._running())
        cap = self._cap()
        while running < job.parallel_trial_count and len(self._unit.trials) < cap:
            suggestion = self._search.ask()
            if suggestion is None:
                await self._unit.save_study(replace(self._study, stop_reason="grid exhausted"))
                log.info("tuning.grid_exhausted", job_id=self._study.job_id)
                return
            trial = TrialRow(
                number=suggestion.number,
                custom_job_id=new_job_id(),
                state=TrialState.ACTIVE,
                parameters=[
                    TrialParameter(parameter_id=key, value=value)
                    for key, value in suggestion.parameters.items()
                ],
                start_time=self._now,
            )
            await self._unit.save_trial(trial, new=True)
            running += 1
            if self._study.job.state is JobState.QUEUED:
                await self._set_state(JobState.RUNNING)

    async def _end(self, reason: str | None) -> None:
        succeeded, _ = self._counts()
        if reason is not None and reason.startswith("failed:"):
            await self._set_state(
                JobState.FAILED, RpcStatus(code=FAILED_CODE, message=reason[len("failed: ") :])
            )
            return
        if succeeded == 0:
            unreported = [
                t for t in self._unit.trials if t.infeasible_reason.startswith("no objective")
            ]
            if unreported or not self._unit.trials:
                metric = self._spec.metrics[0].metric_id
                message = f"no trial reported the objective metric {metric!r}"
            else:
                last = self._unit.trials[-1]
                message = f"every trial was infeasible (the last: {last.infeasible_reason})"
            await self._set_state(JobState.FAILED, RpcStatus(code=FAILED_CODE, message=message))
            return
        await self._set_state(JobState.SUCCEEDED)

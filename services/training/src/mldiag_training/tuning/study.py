"""One unit of work's decisions about a study (see :class:`StudyPass`): no SQL (the held
unit writes), no bus (facts are staged in the unit), no I/O of its own but the metrics
floor it is handed."""

import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import structlog

from mldiag_schemas.envelope import Envelope
from mldiag_schemas.jobs import TERMINAL_JOB_STATES, JobState, RpcStatus
from mldiag_schemas.tuning import (
    TERMINAL_TRIAL_STATES,
    HyperparameterTuningJob,
    StudySpec,
    TrialEnded,
    TrialParameter,
    TrialState,
    TuningJobStateChanged,
)
from mldiag_training.jobs.service import new_job_id
from mldiag_training.tuning.measurements import final_measurement, objective_values
from mldiag_training.tuning.repository import StudyRow, StudyUnit, TrialRow, to_trial
from mldiag_training.tuning.search import Search
from mldiag_training.tuning.trials import find_trial, objective, objective_step

log = structlog.get_logger(__name__)

CANCELLED_CODE = 1
FAILED_CODE = 9  # FAILED_PRECONDITION, as Vertex fails a study whose trials failed

ACTIVE_TRIAL_STATES = frozenset({TrialState.REQUESTED, TrialState.ACTIVE, TrialState.STOPPING})
"""A trial in these states occupies a slot until its job has ended."""


def failed_trial_limit(job: HyperparameterTuningJob) -> int:
    """INFEASIBLE trials that fail the study (``maxFailedTrialCount``; 0: half the trials,
    at least one)."""
    if job.max_failed_trial_count > 0:
        return job.max_failed_trial_count
    return max(1, math.ceil(job.max_trial_count / 2))


class StudyPass:
    """One pass over a held study: finalise the trials whose jobs ended (once their metric
    points are read, or after ``grace``), judge the running ones again, note the best
    trial, decide the study's state and suggest trials into free slots. Facts are staged
    in the unit; side effects (jobs to create or cancel) are read off its trials after
    commit."""

    def __init__(
        self,
        unit: StudyUnit,
        search: Search,
        floor: Callable[[], Awaitable[int | None]],
        grace: timedelta,
        unread_limit: timedelta,
    ) -> None:
        self._floor = floor
        self._grace = grace
        self._unread_limit = unread_limit
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
            floor = await self._floor()
        for trial in waiting:
            sequence = trial.metrics_sequence
            read = not sequence or (floor is not None and floor >= sequence)
            # Points of a trial that reported nothing yet may still be on their way (the
            # launcher's last forward races the replica's exit): give them the grace too.
            hopeful = read and final_measurement(trial.measurements, self._spec) is None
            waited = self._now - trial.job_end_time if trial.job_end_time else None
            # Unread points may sit with a consumer that crashed holding them: JetStream
            # gives them again once their ack wait has passed, so wait for that much.
            if not read and waited is not None and waited < self._unread_limit:
                continue
            if hopeful and waited is not None and waited < self._grace:
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
                (m for m in reversed(trial.measurements) if objective(m, spec) is not None),
                None,
            )
            value = objective(latest, spec) if latest is not None else None
            if latest is None or value is None:
                continue
            if self._search.report(trial.number, objective_step(latest, spec), value):
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
        best = find_trial(self._unit, study.best_trial) if study.best_trial is not None else None
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

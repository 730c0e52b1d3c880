"""A tuning job's runs: the study's own run (created from ``TuningJobCreated``, its phase and
best trial following ``TuningJobStateChanged``) and what ``TrialEnded`` adds to a trial's run
(no SQL, no bus client here). A trial's run itself is created like any custom job's
(:func:`mldiag_run_registry.jobs.service.job_run_request`).

The study's run (id = the tuning job's):

- ``displayName``: the job's; ``runSet``: the message's (the study's ``displayName``, which
  the trials' runs get too; a run set is any 1-200 characters, so it is used as it is);
- ``labels``: the job's, plus ``mldiag-job: tuning-job``, ``mldiag-job-state`` and
  ``mldiag-tuning-job: <id>``;
- ``orchestrator`` ``CUSTOM``, ``workloadId`` and ``workloadDetails.custom.id`` the job's
  resource name (``.../hyperparameterTuningJobs/{id}``);
- ``configs.userConfigs``: the study spec, readably: ``algorithm``, ``max_trial_count``,
  ``parallel_trial_count``, ``max_failed_trial_count``, ``measurement_selection_type``,
  ``median_stopping``, ``metrics.<metricId>`` (its goal) and ``parameters.<parameterId>``
  (its domain and scale, e.g. ``DOUBLE [0.0001, 0.1] UNIT_LOG_SCALE``);
  ``softwareConfigs.trialJob`` and ``hardwareConfigs``: what every trial runs, on what.

Its phase follows the job's state exactly as a custom job's run does. A state change that
names a best trial merges into ``userConfigs`` ``best_trial_id``, ``best_trial_run`` (the
trial's custom job: its run), ``best_<metricId>`` (final values), ``best_params.<id>`` and
``trials_finished`` (succeeded + infeasible), even into an ended run (configs describe a run
and may come after its end), and stores the metric ``best_<metricId>`` at step
``trials_finished`` (an event id derived from the job and the step: a redelivery stores
nothing twice). A best trial older than the recorded one (fewer trials finished) does not
replace it.

A trial's end merges ``trial_state``, ``stopped_early``, ``final_<metricId>`` and (when
INFEASIBLE) ``infeasible_reason`` into its run's ``userConfigs``. A trial stopped early by
median stopping had its custom job cancelled, so its run already ended ``FAILED`` with
``errorDetails`` ``CANCELLED``/``JOB_CANCELLED`` (not a crash: the event-detector opens no
TERMINATION for it). An ended run's phase is final (only a resume reopens it), so it stays
so; ``trial_state: SUCCEEDED`` with ``stopped_early: true`` says what happened.
"""

import re
import uuid
from collections.abc import Sequence
from typing import Protocol

import structlog
from pydantic import JsonValue, ValidationError

from mldiag_platform.errors import InvalidArgument
from mldiag_run_registry.jobs.service import (
    JOB_LABEL,
    STATE_LABEL,
    TUNING_JOB_LABEL,
    TUNING_KIND,
    JobRunsService,
    spec_configs,
    state_label,
    with_job_labels,
)
from mldiag_run_registry.lookup import RunFinder
from mldiag_run_registry.runs.errors import RunNotYetCreated
from mldiag_schemas.jobs import JobState
from mldiag_schemas.runs import (
    Configs,
    CreateRunRequest,
    CustomWorkload,
    Orchestrator,
    RunConfigsReported,
    WorkloadDetails,
)
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived
from mldiag_schemas.tuning import (
    GoalType,
    HyperparameterTuningJob,
    MeasurementSelectionType,
    ParameterSpec,
    StudySpec,
    TrialEnded,
    TrialState,
    TuningJobCreated,
    TuningJobStateChanged,
)

log = structlog.get_logger(__name__)

BEST_NAMESPACE = uuid.UUID("5b0f2c53-8f57-4b8e-9a59-5d1c0c6b7e21")
"""Namespace of the event ids of best-so-far points (uuid5 of job and step)."""
TRIALS_FINISHED = "trials_finished"
"""The study run's config: trials succeeded + infeasible when its best was recorded."""

_NOT_A_METRIC_CHARACTER = re.compile(r"[^A-Za-z0-9_./:-]")


class ConfigsMerger(Protocol):
    """Merges configs into a run whatever its phase (``RunService.report_configs``)."""

    async def report_configs(self, report: RunConfigsReported) -> None:
        """Merge each non-empty section key by key; ``RunNotYetCreated`` while unknown."""
        ...


class MetricWriter(Protocol):
    """Stores metric points, once per message id (``MetricsService.store``)."""

    async def store(self, messages: Sequence[MetricPointsReceived]) -> int:
        """Store the messages not stored before; how many points were new."""
        ...


def tuning_job_name(project: str, location: str, job_id: str) -> str:
    """The tuning job's resource name."""
    return f"projects/{project}/locations/{location}/hyperparameterTuningJobs/{job_id}"


def _number(value: float) -> str:
    return f"{value:g}"


def _domain(spec: ParameterSpec) -> str:
    """A parameter's domain and scale in words: ``DOUBLE [0.001, 0.1] UNIT_LOG_SCALE``."""
    if spec.double_value_spec is not None:
        double = spec.double_value_spec
        text = f"DOUBLE [{_number(double.min_value)}, {_number(double.max_value)}]"
    elif spec.integer_value_spec is not None:
        integer = spec.integer_value_spec
        text = f"INTEGER [{integer.min_value}, {integer.max_value}]"
    elif spec.discrete_value_spec is not None:
        values = ", ".join(_number(value) for value in spec.discrete_value_spec.values)
        text = f"DISCRETE {{{values}}}"
    else:
        choices = spec.categorical_value_spec.values if spec.categorical_value_spec else []
        return f"CATEGORICAL {{{', '.join(choices)}}}"  # no scale for categories
    return f"{text} {spec.scale_type.value}"


def _parameters(specs: Sequence[ParameterSpec], under: str = "") -> dict[str, JsonValue]:
    """Each parameter's domain (conditional ones with their condition), by id."""
    described: dict[str, JsonValue] = {}
    for spec in specs:
        described[spec.parameter_id] = _domain(spec) + under
        for conditional in spec.conditional_parameter_specs:
            if conditional.parent_discrete_values is not None:
                values = [_number(v) for v in conditional.parent_discrete_values.values]
            elif conditional.parent_int_values is not None:
                values = [str(v) for v in conditional.parent_int_values.values]
            else:
                parent = conditional.parent_categorical_values
                values = list(parent.values) if parent else []
            condition = f" when {spec.parameter_id} in {{{', '.join(values)}}}"
            described |= _parameters([conditional.parameter_spec], condition)
    return described


def _goal(goal: GoalType) -> str:
    return GoalType.MAXIMIZE.value if goal is GoalType.UNSPECIFIED else goal.value


def study_summary(job: HyperparameterTuningJob) -> dict[str, JsonValue]:
    """The study spec and the job's counts, readably (the study run's userConfigs)."""
    study: StudySpec = job.study_spec
    selection = study.measurement_selection_type
    if selection is MeasurementSelectionType.UNSPECIFIED:
        selection = MeasurementSelectionType.LAST_MEASUREMENT
    median = study.median_automated_stopping_spec
    return {
        "algorithm": study.algorithm.value,
        "max_trial_count": job.max_trial_count,
        "parallel_trial_count": job.parallel_trial_count,
        "max_failed_trial_count": job.max_failed_trial_count,
        "measurement_selection_type": selection.value,
        "median_stopping": (
            "off" if median is None else "elapsed time" if median.use_elapsed_duration else "steps"
        ),
        "metrics": {metric.metric_id: _goal(metric.goal) for metric in study.metrics},
        "parameters": _parameters(study.parameters),
    }


def study_run_request(message: TuningJobCreated) -> CreateRunRequest:
    """The create request of the study's run (see the module's mapping)."""
    job = message.job
    name = job.name or tuning_job_name(message.project, message.location, message.job_id)
    state = JobState.QUEUED if job.state is JobState.UNSPECIFIED else job.state
    labels = with_job_labels(
        dict(job.labels),
        {
            JOB_LABEL: TUNING_KIND,
            STATE_LABEL: state_label(state),
            TUNING_JOB_LABEL: message.job_id,
        },
    )
    configs = spec_configs(job.trial_job_spec, "trialJob")
    configs.user_configs.update(study_summary(job))
    try:
        return CreateRunRequest(
            run_id=message.job_id,
            display_name=job.display_name,
            run_set=message.run_set or job.display_name,
            labels=labels,
            configs=configs,
            orchestrator=Orchestrator.CUSTOM,
            workload_details=WorkloadDetails(
                custom=CustomWorkload(
                    id=name,
                    display_name=job.display_name,
                    create_time=job.create_time or message.occurred_at,
                )
            ),
            workload_id=name,
        )
    except ValidationError as error:  # a job the training API accepted always fits a run
        raise InvalidArgument(
            f"tuning job {message.job_id}'s run would not be valid: {error.errors()[0]['msg']}"
        ) from None


def best_metric_name(metric_id: str) -> str:
    """The study run's best-so-far metric of ``metric_id``, as a valid metric name."""
    return _NOT_A_METRIC_CHARACTER.sub("_", f"best_{metric_id}")[:200]


def finished(message: TuningJobStateChanged) -> int:
    """How many trials had ended when the message was sent."""
    return message.trials_succeeded + message.trials_infeasible


def best_configs(message: TuningJobStateChanged) -> dict[str, JsonValue]:
    """What the message's best trial puts in the study run's userConfigs (none: empty)."""
    best = message.best_trial
    if best is None:
        return {}
    configs: dict[str, JsonValue] = {
        "best_trial_id": best.id,
        "best_trial_run": best.custom_job.rsplit("/", 1)[-1],
        "best_params": {parameter.parameter_id: parameter.value for parameter in best.parameters},
        TRIALS_FINISHED: finished(message),
    }
    if best.final_measurement is not None:
        for metric in best.final_measurement.metrics:
            configs[f"best_{metric.metric_id}"] = metric.value
    return configs


def best_points(message: TuningJobStateChanged) -> MetricPointsReceived | None:
    """The best trial's final values as best-so-far points of the study run, at step
    ``trials_finished``; the same event id for the same job and step."""
    best = message.best_trial
    if best is None or best.final_measurement is None or not best.final_measurement.metrics:
        return None
    step = finished(message)
    key = uuid.uuid5(BEST_NAMESPACE, f"{message.job_id}/{step}")
    return MetricPointsReceived(
        event_id=key,
        occurred_at=message.occurred_at,
        run_id=message.job_id,
        batch_id=key,
        chunk=0,
        series=[
            MetricColumns(
                name=best_metric_name(metric.metric_id), steps=[step], values=[metric.value]
            )
            for metric in best.final_measurement.metrics
        ],
    )


def trial_outcome(message: TrialEnded) -> dict[str, JsonValue]:
    """What a trial's end puts in its run's userConfigs."""
    trial = message.trial
    outcome: dict[str, JsonValue] = {
        "trial_state": trial.state.value,
        "stopped_early": message.stopped_early,
    }
    if trial.final_measurement is not None:
        for metric in trial.final_measurement.metrics:
            outcome[f"final_{metric.metric_id}"] = metric.value
    if trial.state is TrialState.INFEASIBLE or trial.infeasible_reason:
        outcome["infeasible_reason"] = trial.infeasible_reason
    return outcome


class TuningRunsService:
    """Creates each study's run, keeps its phase and best trial current, and records each
    trial's outcome on the trial's run."""

    def __init__(
        self,
        jobs: JobRunsService,
        finder: RunFinder,
        configs: ConfigsMerger,
        metrics: MetricWriter,
    ) -> None:
        self._jobs = jobs
        self._finder = finder
        self._configs = configs
        self._metrics = metrics

    async def tuning_job_created(self, message: TuningJobCreated) -> None:
        """Create the study's run; a run of that id already there is left as it is."""
        await self._jobs.create_job_run(
            message.project, message.location, study_run_request(message), TUNING_KIND
        )

    async def tuning_job_state_changed(self, message: TuningJobStateChanged) -> None:
        """Record the best trial (if any), then mirror the state into the study's run.

        ``RunNotYetCreated`` (retried) while the run is unknown.
        """
        # The best first: the final state change carries the final best, and configs still
        # merge into a run its phase has ended, so nothing depends on the order after a crash.
        if message.best_trial is not None:
            await self._record_best(message)
        await self._jobs.mirror_state(
            message.job_id, message.state, message.error, kind=TUNING_KIND
        )

    async def _record_best(self, message: TuningJobStateChanged) -> None:
        found = await self._finder.find_run(message.job_id)
        if found is None:
            raise RunNotYetCreated(f"tuning job {message.job_id}'s run is not (yet) registered")
        run = found[2]
        if run.delete_time is not None:
            log.info("tuning.best_dropped", run_id=run.run_id, reason="run deleted")
            return
        recorded = run.configs.user_configs.get(TRIALS_FINISHED)
        if isinstance(recorded, int) and recorded > finished(message):
            # A redelivery of an older fact after a newer one: the newer best stands.
            log.info("tuning.best_stale", run_id=run.run_id, recorded=recorded)
        else:
            report = RunConfigsReported(
                run_id=message.job_id,
                configs=Configs(user_configs=best_configs(message)),
                source="tuning",
            )
            await self._configs.report_configs(report)
        points = best_points(message)
        stored = await self._metrics.store([points]) if points is not None else 0
        log.info(
            "tuning.best_recorded",
            run_id=run.run_id,
            trial_id=message.best_trial.id if message.best_trial else "",
            trials_finished=finished(message),
            points=stored,
        )

    async def trial_ended(self, message: TrialEnded) -> None:
        """Merge the trial's outcome into its run's configs (whatever the run's phase).

        ``RunNotYetCreated`` (retried) while the run is unknown.
        """
        report = RunConfigsReported(
            run_id=message.trial_job_id,
            configs=Configs(user_configs=trial_outcome(message)),
            source="tuning",
        )
        await self._configs.report_configs(report)
        log.info(
            "tuning.trial_recorded",
            run_id=message.trial_job_id,
            tuning_job_id=message.tuning_job_id,
            trial_id=message.trial.id,
            state=message.trial.state.value,
            stopped_early=message.stopped_early,
        )

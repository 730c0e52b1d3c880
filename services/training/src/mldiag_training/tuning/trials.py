"""Trials as the controller sees them, pure: a trial's custom job, the search's history
rebuilt from the trials table, a trial's objective, its metric points."""

import math
from collections.abc import Sequence
from datetime import datetime

from mldiag_schemas.jobs import CustomJob, EnvVar, GcsDestination, WorkerPoolSpec
from mldiag_schemas.telemetry import MetricPointsReceived
from mldiag_schemas.tuning import (
    Measurement,
    StudySpec,
    TrialState,
)
from mldiag_training.tuning.measurements import MetricPoint, objective_values
from mldiag_training.tuning.repository import StudyRow, StudyUnit, TrialRow
from mldiag_training.tuning.search import TrialRecord, TrialRecordState, argument

TRIAL_ID_ENV = "CLOUD_ML_TRIAL_ID"
"""The environment variable carrying a trial's id into every replica (as on Vertex)."""
TUNING_JOB_LABEL = "mldiag-tuning-job"
"""The label naming a trial's tuning job on its custom job."""
TRIAL_LABEL = "mldiag-trial"
"""The label naming a trial's id on its custom job."""


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


def objective_step(measurement: Measurement, spec: StudySpec) -> int:
    """Where median stopping compares a measurement: its step, or its elapsed seconds."""
    stopping = spec.median_automated_stopping_spec
    if stopping is not None and stopping.use_elapsed_duration:
        return int(measurement.elapsed_duration or 0)
    return measurement.step_count


def objective(measurement: Measurement, spec: StudySpec) -> float | None:
    """The first metric's value in a measurement, None when it lacks it."""
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
                value = objective(measurement, spec)
                if value is not None:
                    intermediate[objective_step(measurement, spec)] = value
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


def find_trial(unit: StudyUnit, number: int) -> TrialRow | None:
    """The trial ``number`` of a held study, None if it has no such trial."""
    return next((t for t in unit.trials if t.number == number), None)


def metric_points(
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

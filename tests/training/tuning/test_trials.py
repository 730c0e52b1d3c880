"""A trial's custom job and the search's history, as the controller builds them (pure)."""

from datetime import UTC, datetime

from mldiag_schemas.jobs import CustomJobSpec
from mldiag_schemas.tuning import (
    HyperparameterTuningJob,
    Measurement,
    MeasurementMetric,
    StudySpec,
    TrialParameter,
    TrialState,
)
from mldiag_training.tuning.repository import StudyRow, TrialRow
from mldiag_training.tuning.study import failed_trial_limit
from mldiag_training.tuning.trials import history, trial_custom_job
from training.jobs.bodies import container_pool
from training.tuning.bodies import sdk_tuning_job, study_spec

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _study(**fields: object) -> StudyRow:
    job = HyperparameterTuningJob.model_validate(sdk_tuning_job(**fields))
    return StudyRow(job_id="123", project="p", location="l", job=job, seed=7)


def _trial(number: int, state: TrialState = TrialState.ACTIVE, **fields: object) -> TrialRow:
    parameters = [
        TrialParameter(parameter_id="lr", value=0.001),
        TrialParameter(parameter_id="batch", value=32.0),
    ]
    return TrialRow(
        number=number,
        custom_job_id=f"9{number}",
        state=state,
        parameters=parameters,
        start_time=NOW,
        **fields,  # type: ignore[arg-type]
    )


def _measurement(step: int, loss: float) -> Measurement:
    return Measurement(step_count=step, metrics=[MeasurementMetric(metric_id="loss", value=loss)])


def test_a_trial_job_appends_args_sets_the_trial_id_and_its_own_output_directory() -> None:
    package = {
        "machineSpec": {"machineType": "n1-standard-4"},
        "replicaCount": "1",
        "pythonPackageSpec": {
            "executorImageUri": "python",
            "packageUris": ["gs://b/p.tar.gz"],
            "pythonModule": "trainer.task",
            "args": ["--epochs=3"],
            "env": [{"name": "CLOUD_ML_TRIAL_ID", "value": "stale"}, {"name": "A", "value": "1"}],
        },
    }
    spec = {
        "workerPoolSpecs": [package, {}, container_pool()],
        "baseOutputDirectory": {"outputUriPrefix": "gs://b/out/"},
    }
    study = _study(trialJobSpec=spec, labels={"team": "x"}, displayName="d" * 128)
    job = trial_custom_job(study, _trial(2))
    chief = job.job_spec.worker_pool_specs[0].python_package_spec
    assert chief is not None
    assert chief.args == ["--epochs=3", "--lr=0.001", "--batch=32"]
    assert [(e.name, e.value) for e in chief.env] == [("A", "1"), ("CLOUD_ML_TRIAL_ID", "3")]
    assert job.job_spec.worker_pool_specs[1].empty  # a skipped position stays skipped
    evaluator = job.job_spec.worker_pool_specs[2].container_spec
    assert evaluator is not None
    assert evaluator.args == ["--lr=0.001", "--batch=32"]
    assert [(e.name, e.value) for e in evaluator.env] == [("CLOUD_ML_TRIAL_ID", "3")]
    assert job.job_spec.base_output_directory is not None
    assert job.job_spec.base_output_directory.output_uri_prefix == "gs://b/out/3/"
    assert job.labels == {"team": "x", "mldiag-tuning-job": "123", "mldiag-trial": "3"}
    assert len(job.display_name) == 128 and job.display_name.endswith(" trial 3")
    CustomJobSpec.model_validate(job.job_spec.model_dump())  # still a valid spec


def test_history_rebuilds_the_search_from_the_trials_table() -> None:
    spec = StudySpec.model_validate(study_spec())
    trials = [
        _trial(
            1,
            TrialState.SUCCEEDED,
            measurements=[_measurement(1, 0.4)],
            final_measurement=_measurement(1, 0.4),
            stopped_early=True,
        ),
        _trial(
            0,
            TrialState.SUCCEEDED,
            measurements=[_measurement(1, 0.5), _measurement(2, 0.3)],
            final_measurement=_measurement(2, 0.3),
        ),
        _trial(2, TrialState.INFEASIBLE),
        _trial(3, TrialState.STOPPING, measurements=[_measurement(1, 0.9)]),
    ]
    records = history(trials, spec)
    assert [r.number for r in records] == [0, 1, 2, 3]
    assert [r.state for r in records] == ["succeeded", "stopped", "infeasible", "active"]
    assert records[0].values == (0.3,) and records[0].intermediate == {1: 0.5, 2: 0.3}
    assert records[2].values is None
    assert records[3].intermediate == {1: 0.9}


def test_the_failed_trial_limit_defaults_to_half_the_trials() -> None:
    assert failed_trial_limit(_study(maxTrialCount=7).job) == 4
    assert failed_trial_limit(_study(maxTrialCount=1, parallelTrialCount=1).job) == 1
    assert failed_trial_limit(_study(maxFailedTrialCount=2).job) == 2

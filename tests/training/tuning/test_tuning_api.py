"""The hyperparameterTuningJobs API and its controller over HTTP, on real NATS and
PostgreSQL. No executor runs here: the tests play the trials' world on the bus (their metric
points, their custom jobs' ends) and watch the controller drive the study."""

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from conftest import ApiTokens
from mldiag_platform.bus import Publisher
from mldiag_platform.settings import NatsSettings
from mldiag_schemas import bus
from mldiag_schemas.auth import Role
from mldiag_schemas.jobs import JobState, RpcStatus
from mldiag_schemas.replicas import CustomJobCreated, CustomJobStateChanged
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived
from mldiag_schemas.tuning import TrialEnded, TuningJobCreated, TuningJobStateChanged
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import read_messages, serving, wait_until
from training.tuning.bodies import sdk_tuning_job, study_spec

pytestmark = pytest.mark.connected

SDK_QUERY = "?%24alt=json%3Benum-encoding%3Dint"
PATH = "/v1/projects/default/locations/local/hyperparameterTuningJobs"


@pytest.fixture
def training_settings(training_settings: TrainingSettings) -> TrainingSettings:
    """The service's settings, with a short wait for trials that measured nothing (they
    end INFEASIBLE in several tests)."""
    return training_settings.model_copy(update={"tuning_metrics_grace_seconds": 1.0})


async def create(api: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    response = await api.post(PATH + SDK_QUERY, json=sdk_tuning_job(**fields))
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


def ident(resource: dict[str, Any] | str) -> str:
    name = resource if isinstance(resource, str) else str(resource["name"])
    return name.rsplit("/", 1)[-1]


async def get(api: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    response = await api.get(f"{PATH}/{job_id}")
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


async def trials_of(api: httpx.AsyncClient, job_id: str, count: int) -> list[dict[str, Any]]:
    job = await wait_until(lambda: get(api, job_id), lambda j: len(j.get("trials", [])) >= count)
    trials: list[dict[str, Any]] = job["trials"]
    return trials


async def report(
    publisher: Publisher, run_id: str, values: list[float], name: str = "loss"
) -> None:
    """The trial's run reports ``name`` at steps 1, 2, ..."""
    await publisher.publish(
        MetricPointsReceived(
            run_id=run_id,
            batch_id=uuid.uuid4(),
            chunk=0,
            series=[MetricColumns(name=name, steps=list(range(1, len(values) + 1)), values=values)],
        )
    )


async def end(
    publisher: Publisher, run_id: str, state: JobState = JobState.SUCCEEDED, message: str = ""
) -> None:
    """The trial's custom job ends."""
    await publisher.publish(
        CustomJobStateChanged(
            job_id=run_id,
            project="default",
            location="local",
            previous_state=JobState.RUNNING,
            state=state,
            error=RpcStatus(code=9, message=message) if message else None,
        )
    )


async def ended(api: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    done = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}
    return await wait_until(lambda: get(api, job_id), lambda j: j["state"] in done, timeout=30)


# --- create, read, validate ------------------------------------------------------------------


async def test_a_study_runs_its_trials_as_custom_jobs(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, nats_settings: NatsSettings
) -> None:
    job = await create(training_api, labels={"team": "vision"})
    job_id = ident(job)
    assert job["state"] == 1  # QUEUED, as enum-encoding=int asks
    assert job["studySpec"]["metrics"][0]["goal"] == 2
    assert job["name"] == f"projects/default/locations/local/hyperparameterTuningJobs/{job_id}"

    trials = await trials_of(training_api, job_id, 2)
    assert [t["id"] for t in trials] == ["1", "2"]  # two in parallel, no more
    current = await get(training_api, job_id)
    assert current["state"] == "JOB_STATE_RUNNING" and "startTime" in current
    first = trials[0]
    assert first["state"] == "ACTIVE"
    assert first["name"] == f"{current['name']}/trials/1"
    custom = ident(first["customJob"])
    assert first["customJob"] == f"projects/default/locations/local/customJobs/{custom}"

    row = await wait_until(
        lambda: training_db.fetchrow("SELECT * FROM custom_jobs WHERE job_id = $1", custom)
    )
    parameters = {p["parameterId"]: p["value"] for p in first["parameters"]}
    assert set(parameters) == {"lr", "batch"}
    response = await training_api.get(f"/v1/projects/default/locations/local/customJobs/{custom}")
    pool = response.json()["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert f"--batch={int(parameters['batch'])}" in pool["args"]
    assert any(arg.startswith("--lr=") for arg in pool["args"])
    assert {"name": "CLOUD_ML_TRIAL_ID", "value": "1"} in pool["env"]
    output = response.json()["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    assert output == "gs://bucket/hpt/1/"
    labels = row["labels"]
    assert '"mldiag-trial": "1"' in labels and job_id in labels and "vision" in labels

    created = await wait_until(
        lambda: read_messages(nats_settings, bus.JOB_CREATED, CustomJobCreated),
        lambda found: len(found) >= 2,
    )
    trial_of = next(c for c in created if c.job_id == custom).trial
    assert trial_of is not None
    assert (trial_of.tuning_job_id, trial_of.trial_id) == (job_id, "1")
    assert trial_of.study_display_name == "sweep"
    assert next(c for c in created if c.job_id == custom).run_set == "sweep"
    [announced] = await read_messages(nats_settings, bus.TUNING_JOB_CREATED, TuningJobCreated)
    assert announced.job_id == job_id and announced.run_set == "sweep"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (  # a grid cannot cover a continuous range
            study_spec(algorithm="GRID_SEARCH"),
            "studySpec.parameters[0]",
        ),
        (  # log scale over non-positive values
            study_spec(
                parameters=[
                    {
                        "parameterId": "lr",
                        "doubleValueSpec": {"minValue": 0, "maxValue": 1},
                        "scaleType": "UNIT_LOG_SCALE",
                    }
                ]
            ),
            "studySpec.parameters[0]",
        ),
        (  # duplicate ids
            study_spec(
                parameters=[
                    {"parameterId": "x", "discreteValueSpec": {"values": [1, 2]}},
                    {"parameterId": "x", "discreteValueSpec": {"values": [3]}},
                ]
            ),
            "studySpec.parameters[1].parameterId",
        ),
        (  # a condition its parent can never meet
            study_spec(
                parameters=[
                    {
                        "parameterId": "opt",
                        "categoricalValueSpec": {"values": ["adam", "sgd"]},
                        "conditionalParameterSpecs": [
                            {
                                "parentCategoricalValues": {"values": ["rmsprop"]},
                                "parameterSpec": {
                                    "parameterId": "momentum",
                                    "doubleValueSpec": {"minValue": 0, "maxValue": 1},
                                },
                            }
                        ],
                    }
                ]
            ),
            "studySpec.parameters[0].conditionalParameterSpecs[0]",
        ),
    ],
)
async def test_a_study_the_search_cannot_run_is_refused_naming_the_field(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, spec: Any, field: str
) -> None:
    response = await training_api.post(PATH, json=sdk_tuning_job(studySpec=spec))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    violations = next(d for d in error["details"] if "fieldViolations" in d)["fieldViolations"]
    assert violations[0]["field"].startswith(field), violations
    assert await training_db.fetchval("SELECT count(*) FROM tuning_jobs") == 0


async def test_parallel_above_max_and_bad_trial_specs_are_refused(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    response = await training_api.post(
        PATH, json=sdk_tuning_job(maxTrialCount=2, parallelTrialCount=3)
    )
    assert response.status_code == 400
    assert "parallelTrialCount" in response.json()["error"]["message"]

    bad_pool = {
        "machineSpec": {"machineType": "no-such-box"},
        "replicaCount": "1",
        "containerSpec": {"imageUri": "python:3.12"},
    }
    response = await training_api.post(
        PATH, json=sdk_tuning_job(trialJobSpec={"workerPoolSpecs": [bad_pool]})
    )
    assert response.status_code == 400, response.text
    assert "trialJobSpec.workerPoolSpecs[0].machineSpec.machineType" in response.text

    response = await training_api.post(
        PATH, json=sdk_tuning_job(studySpec=study_spec(decayCurveStoppingSpec={"useSeconds": True}))
    )
    assert response.status_code == 501, response.text
    assert "studySpec.decayCurveStoppingSpec" in response.json()["error"]["message"]

    response = await training_api.post(PATH, json={**sdk_tuning_job(), "surprise": 1})
    assert response.status_code == 400
    assert await training_db.fetchval("SELECT count(*) FROM tuning_jobs") == 0


async def test_list_filter_cancel_and_delete(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    first = ident(await create(training_api, displayName="one"))
    second = ident(await create(training_api, displayName="two"))
    page = (await training_api.get(PATH, params={"pageSize": 1})).json()
    assert [ident(j) for j in page["hyperparameterTuningJobs"]] == [second]
    page = (
        await training_api.get(PATH, params={"pageSize": 1, "pageToken": page["nextPageToken"]})
    ).json()
    assert [ident(j) for j in page["hyperparameterTuningJobs"]] == [first]
    page = (await training_api.get(PATH, params={"filter": 'display_name="one"'})).json()
    assert [ident(j) for j in page["hyperparameterTuningJobs"]] == [first]

    refused = await training_api.delete(f"{PATH}/{first}")
    assert refused.status_code == 400  # FAILED_PRECONDITION, as Google maps it
    assert (await training_api.post(f"{PATH}/{first}:cancel")).status_code == 200
    trials = await trials_of(training_api, first, 2)
    done = await ended(training_api, first)
    assert done["state"] == "JOB_STATE_CANCELLED"
    assert done["error"]["code"] == 1
    # The trials' jobs were asked to stop.
    states = await training_db.fetch(
        "SELECT state FROM custom_jobs WHERE job_id = ANY($1::text[])",
        [ident(t["customJob"]) for t in trials],
    )
    assert states and {s["state"] for s in states} <= {
        "JOB_STATE_CANCELLING",
        "JOB_STATE_CANCELLED",
    }
    # ... and the study does not wait for them forever: CANCELLED came once they ended.
    assert (await training_api.post(f"{PATH}/{first}:cancel")).status_code == 400
    deleted = await training_api.delete(f"{PATH}/{first}")
    assert deleted.status_code == 200
    assert (await training_api.get(f"{PATH}/{first}")).status_code == 404
    assert (
        await training_db.fetchval(
            "SELECT count(*) FROM tuning_trials WHERE tuning_job_id = $1", first
        )
        == 0
    )
    assert await training_db.fetchval(
        "SELECT count(*) FROM custom_jobs WHERE job_id = ANY($1::text[])",
        [ident(t["customJob"]) for t in trials],
    ) == len(trials)


# --- the controller -----------------------------------------------------------------------


async def test_a_study_runs_to_success_with_the_best_trial(
    training_api: httpx.AsyncClient, publisher: Publisher, nats_settings: NatsSettings
) -> None:
    job_id = ident(await create(training_api))
    finished: set[str] = set()
    for round_ in range(2):
        trials = await trials_of(training_api, job_id, 2 * (round_ + 1))
        for trial in trials:
            custom = ident(trial["customJob"])
            if custom in finished:
                continue
            finished.add(custom)
            loss = 1.0 / int(trial["id"])  # later trials are better
            await report(publisher, custom, [loss * 2, loss])
            await end(publisher, custom)
    done = await ended(training_api, job_id)
    assert done["state"] == "JOB_STATE_SUCCEEDED", done
    assert len(done["trials"]) == 4
    assert all(t["state"] == "SUCCEEDED" for t in done["trials"])
    last = done["trials"][3]
    assert last["finalMeasurement"]["stepCount"] == "2"
    assert last["finalMeasurement"]["metrics"] == [{"metricId": "loss", "value": 0.25}]
    assert [m["stepCount"] for m in last["measurements"]] == ["1", "2"]

    ends = await wait_until(
        lambda: read_messages(nats_settings, bus.TRIAL_ENDED, TrialEnded),
        lambda found: len(found) == 4,
    )
    assert {e.trial_job_id for e in ends} == finished
    changes = await read_messages(
        nats_settings, bus.TUNING_JOB_STATE_CHANGED, TuningJobStateChanged
    )
    final = [c for c in changes if c.state is JobState.SUCCEEDED]
    assert final and final[-1].best_trial is not None and final[-1].best_trial.id == "4"
    assert final[-1].trials_succeeded == 4


async def test_failed_trials_fail_the_study_past_max_failed_trial_count(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    job_id = ident(await create(training_api, maxTrialCount=6, maxFailedTrialCount=2))
    trials = await trials_of(training_api, job_id, 2)
    for trial in trials:
        await end(publisher, ident(trial["customJob"]), JobState.FAILED, "exit status 3")
    done = await ended(training_api, job_id)
    assert done["state"] == "JOB_STATE_FAILED"
    assert "2 trials were infeasible" in done["error"]["message"]
    assert all(t["state"] == "INFEASIBLE" for t in done["trials"])
    assert "exit status 3" in done["trials"][0]["infeasibleReason"]


async def test_no_trial_reporting_the_objective_fails_naming_it(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    job_id = ident(await create(training_api, maxTrialCount=2, maxFailedTrialCount=5))
    for trial in await trials_of(training_api, job_id, 2):
        await report(publisher, ident(trial["customJob"]), [0.5], name="accuracy")
        await end(publisher, ident(trial["customJob"]))
    done = await ended(training_api, job_id)
    assert done["state"] == "JOB_STATE_FAILED"
    assert done["error"]["message"] == "no trial reported the objective metric 'loss'"


async def test_a_grid_ends_when_exhausted(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    spec = study_spec(
        algorithm="GRID_SEARCH",
        parameters=[{"parameterId": "batch", "discreteValueSpec": {"values": [16, 32, 64]}}],
    )
    job_id = ident(await create(training_api, studySpec=spec, maxTrialCount=10))
    seen: set[str] = set()
    while len(seen) < 3:
        for trial in await trials_of(training_api, job_id, min(3, len(seen) + 1)):
            custom = ident(trial["customJob"])
            if custom not in seen:
                seen.add(custom)
                await report(publisher, custom, [1.0])
                await end(publisher, custom)
    done = await ended(training_api, job_id)
    assert done["state"] == "JOB_STATE_SUCCEEDED"
    values = sorted(t["parameters"][0]["value"] for t in done["trials"])
    assert values == [16, 32, 64]


async def test_median_stopping_stops_a_bad_trial_which_ends_with_its_measurements(
    training_api: httpx.AsyncClient,
    training_db: asyncpg.Pool,
    publisher: Publisher,
    nats_settings: NatsSettings,
) -> None:
    spec = study_spec(medianAutomatedStoppingSpec={})
    job_id = ident(
        await create(training_api, studySpec=spec, maxTrialCount=6, parallelTrialCount=1)
    )
    for number in range(1, 6):  # five good trials: the median's baseline
        [trial] = [
            t for t in await trials_of(training_api, job_id, number) if t["id"] == str(number)
        ]
        custom = ident(trial["customJob"])
        await report(publisher, custom, [1.0, 0.9, 0.8])
        await end(publisher, custom)
    [bad] = [t for t in await trials_of(training_api, job_id, 6) if t["id"] == "6"]
    custom = ident(bad["customJob"])
    await report(publisher, custom, [5.0, 4.9])  # worse than the median at every step
    # The controller cancels its job (nobody else does here), which ends it.
    await wait_until(
        lambda: training_db.fetchval("SELECT state FROM custom_jobs WHERE job_id = $1", custom),
        lambda state: state in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"),
    )
    done = await ended(training_api, job_id)
    assert done["state"] == "JOB_STATE_SUCCEEDED"
    stopped = done["trials"][5]
    assert stopped["state"] == "SUCCEEDED"  # stopped early, with what it had measured
    assert stopped["stoppedEarly"] is True
    assert not any(t["stoppedEarly"] for t in done["trials"][:5])
    assert stopped["finalMeasurement"]["metrics"] == [{"metricId": "loss", "value": 4.9}]
    facts = await wait_until(
        lambda: read_messages(nats_settings, bus.TRIAL_ENDED, TrialEnded),
        lambda found: len(found) == 6,
    )
    assert [f.stopped_early for f in facts if f.trial_job_id == custom] == [True]


async def test_a_restarted_controller_resumes_the_study_without_losing_or_repeating_trials(
    training_settings: TrainingSettings,
    api_tokens: ApiTokens,
    training_db: asyncpg.Pool,
    publisher: Publisher,
) -> None:
    headers = api_tokens.headers(Role.EDITOR)
    async with serving(create_app(training_settings), headers) as api:
        job_id = ident(await create(api, maxTrialCount=5, parallelTrialCount=2))
        first = await trials_of(api, job_id, 2)
        await report(publisher, ident(first[0]["customJob"]), [0.5])
        await end(publisher, ident(first[0]["customJob"]))
        await trials_of(api, job_id, 3)
    # Down: trial 2 and 3 run on. A crash between a trial's row and its job: trial 4's row
    # is committed without its job.
    await training_db.execute(
        "INSERT INTO tuning_trials (tuning_job_id, number, custom_job_id, state, parameters,"
        " start_time) VALUES ($1, 3, '1999999999999999999', 'ACTIVE',"
        ' \'[{"parameterId": "lr", "value": 0.01}, {"parameterId": "batch",'
        ' "value": 32}]\'::jsonb, now())',
        job_id,
    )
    await training_db.execute(
        "UPDATE tuning_jobs SET revision = revision + 1 WHERE job_id = $1", job_id
    )
    async with serving(create_app(training_settings), headers) as api:
        # At start the reconcile creates trial 4's job (once).
        await wait_until(
            lambda: training_db.fetchval(
                "SELECT count(*) FROM custom_jobs WHERE job_id = '1999999999999999999'"
            ),
            lambda count: count == 1,
        )
        trials = await trials_of(api, job_id, 4)
        for trial in trials[1:]:
            await report(publisher, ident(trial["customJob"]), [0.4])
            await end(publisher, ident(trial["customJob"]))
        last = [t for t in await trials_of(api, job_id, 5) if t["id"] == "5"]
        await report(publisher, ident(last[0]["customJob"]), [0.3])
        await end(publisher, ident(last[0]["customJob"]))
        done = await ended(api, job_id)
    assert done["state"] == "JOB_STATE_SUCCEEDED"
    assert [t["id"] for t in done["trials"]] == ["1", "2", "3", "4", "5"]
    assert all(t["state"] == "SUCCEEDED" for t in done["trials"])
    jobs = [ident(t["customJob"]) for t in done["trials"]]
    assert len(set(jobs)) == 5
    assert (
        await training_db.fetchval(
            "SELECT count(*) FROM custom_jobs WHERE labels->>'mldiag-tuning-job' = $1", job_id
        )
        == 5
    )


async def test_a_trial_job_created_twice_by_id_is_created_once(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool, nats_settings: NatsSettings
) -> None:
    job_id = ident(await create(training_api, maxTrialCount=1, parallelTrialCount=1))
    [trial] = await trials_of(training_api, job_id, 1)
    custom = ident(trial["customJob"])
    await wait_until(
        lambda: read_messages(nats_settings, bus.JOB_CREATED, CustomJobCreated),
        lambda found: any(c.job_id == custom for c in found),
    )
    # Another pass (a restart's reconcile) asks again: the job is answered, not re-announced.
    await training_db.execute(
        "UPDATE tuning_trials SET job_created = false WHERE custom_job_id = $1", custom
    )
    await training_db.execute(
        "UPDATE tuning_jobs SET revision = revision + 1 WHERE job_id = $1", job_id
    )
    await wait_until(
        lambda: training_db.fetchval(
            "SELECT job_created FROM tuning_trials WHERE custom_job_id = $1", custom
        )
    )
    created = await read_messages(nats_settings, bus.JOB_CREATED, CustomJobCreated)
    assert [c.job_id for c in created].count(custom) == 1


async def test_study_stopping_config_ends_the_search_early(
    training_api: httpx.AsyncClient, publisher: Publisher
) -> None:
    # No better value for two ended trials in a row: the study asks for no more.
    spec = study_spec(studyStoppingConfig={"maxNumTrialsNoProgress": 2})
    job_id = ident(
        await create(training_api, studySpec=spec, maxTrialCount=8, parallelTrialCount=1)
    )
    finished: set[str] = set()

    async def step() -> dict[str, Any]:
        job = await get(training_api, job_id)
        for trial in job.get("trials", []):
            custom = ident(trial["customJob"])
            if custom not in finished:
                finished.add(custom)
                await report(publisher, custom, [0.5 if trial["id"] == "1" else 0.9])
                await end(publisher, custom)
        return job

    done = await wait_until(step, lambda j: j["state"] == "JOB_STATE_SUCCEEDED", timeout=30)
    # Trial 1 was the best; 2 and 3 made no progress. The next trial starts when a job ends,
    # before the ended trial is judged, so a fourth may have run.
    assert len(done["trials"]) in (3, 4)


async def test_should_stop_asap_stops_the_running_trials_when_a_rule_fires(
    training_api: httpx.AsyncClient, training_db: asyncpg.Pool
) -> None:
    spec = study_spec(
        studyStoppingConfig={
            "shouldStopAsap": True,
            "maximumRuntimeConstraint": {"maxDuration": "1s"},
        }
    )
    job_id = ident(await create(training_api, studySpec=spec, maxTrialCount=8))
    trials = await trials_of(training_api, job_id, 2)
    # Nobody reports: the runtime rule fires, both trials' jobs are cancelled (by the
    # scheduler, as no executor runs them), and they end INFEASIBLE (nothing measured).
    done = await ended(training_api, job_id)
    assert len(done["trials"]) == 2
    assert {t["state"] for t in done["trials"]} == {"INFEASIBLE"}
    states = await training_db.fetch(
        "SELECT state FROM custom_jobs WHERE job_id = ANY($1::text[])",
        [ident(t["customJob"]) for t in trials],
    )
    assert {s["state"] for s in states} == {"JOB_STATE_CANCELLED"}
    assert done["state"] == "JOB_STATE_FAILED"  # no trial reported the objective
    assert "no trial reported the objective metric 'loss'" in done["error"]["message"]


async def test_a_trial_whose_job_someone_cancelled_is_infeasible(
    training_api: httpx.AsyncClient,
) -> None:
    # The short route form, as for custom jobs.
    response = await training_api.post(
        "/v1/hyperparameterTuningJobs",
        json=sdk_tuning_job(maxTrialCount=1, parallelTrialCount=1, maxFailedTrialCount=1),
    )
    assert response.status_code == 200, response.text
    job_id = ident(response.json())
    [trial] = await trials_of(training_api, job_id, 1)
    # The trial is stored (and served) a moment before its custom job is created.
    custom_job = ident(trial["customJob"])
    for _ in range(100):
        if (await training_api.get(f"/v1/customJobs/{custom_job}")).status_code == 200:
            break
        await asyncio.sleep(0.1)
    cancelled = await training_api.post(f"/v1/customJobs/{custom_job}:cancel")
    assert cancelled.status_code == 200, cancelled.text
    done = await ended(training_api, job_id)
    [trial] = done["trials"]
    assert trial["state"] == "INFEASIBLE"
    assert trial["infeasibleReason"] == "its custom job was cancelled"
    assert done["state"] == "JOB_STATE_FAILED"
    listed = await training_api.get(
        "/v1/hyperparameterTuningJobs", params={"filter": "state=FAILED"}
    )
    assert [ident(j) for j in listed.json()["hyperparameterTuningJobs"]] == [job_id]

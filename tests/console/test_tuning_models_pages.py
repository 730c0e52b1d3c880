"""The Tuning and Models pages (console/src/pages/studies.ts, study.ts, models.ts, model.ts)
in a real browser.

Proves: the nav's Tuning entry lists studies with trials done out of the most asked for and
the best value under the study's goal; a study's page draws the objective over trials (a
point per valued trial, the best so far) and the parallel coordinates (log, linear and
categorical axes, then the objective; a line per trial), puts the objective on a log axis
in both plots when asked (``y=log`` in the URL), badges the trial median stopping
ended and the infeasible one, and links two picked trials to the compare page with their runs;
the nav's Models entry lists models with their default version and aliases, and a model's page
shows every version (aliases, artifact URI, image) with its lineage linked to the study and the
run.

The training API is mostly answered by a Playwright route from documents built with the
contract's models (``mldiag_schemas.tuning``, ``mldiag_schemas.models``), never hand-written
JSON; the last test serves the real training service beside the registry (no executor: its
trials stay active) and reads a real study and a real model through the console. The
registry, the console and the trials' runs are the real ones of ``conftest``.
"""

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from playwright.sync_api import Page, Route, expect

from console.fake_training import ago
from console.helpers import Pages, Platform, wait_for
from mldiag_schemas.jobs import (
    ContainerSpec,
    CustomJobSpec,
    JobState,
    MachineSpec,
    VertexErrorBody,
    VertexErrorStatus,
    WorkerPoolSpec,
)
from mldiag_schemas.models import ListModelsResponse, Model, ModelContainerSpec, ModelLineage
from mldiag_schemas.tuning import (
    CategoricalValueSpec,
    DoubleValueSpec,
    GoalType,
    HyperparameterTuningJob,
    IntegerValueSpec,
    ListHyperparameterTuningJobsResponse,
    Measurement,
    MeasurementMetric,
    MetricSpec,
    ParameterSpec,
    ScaleType,
    StudySpec,
    Trial,
    TrialParameter,
    TrialState,
)
from mldiag_training.app import create_app as create_training
from mldiag_training.settings import TrainingSettings
from support import served_in_thread

pytestmark = pytest.mark.e2e

PARENT = "projects/default/locations/local"
STUDY = "4242"
MODEL = "resnet-model"
# trial id -> (lr, layers, optimizer, final loss or None, stopped early)
TRIALS: dict[int, tuple[float, int, str, float | None, bool]] = {
    1: (1e-3, 2, "sgd", 0.8, False),
    2: (1e-2, 4, "adam", 0.4, False),
    3: (1e-1, 8, "adam", None, False),
    4: (1e-4, 1, "sgd", 0.6, True),
    5: (3e-3, 3, "adam", 0.2, False),
}


def _trial_job(trial_id: int) -> str:
    return f"77{trial_id:02d}"


def _trial(trial_id: int) -> Trial:
    lr, layers, optimizer, loss, early = TRIALS[trial_id]
    final = (
        None
        if loss is None
        else Measurement(step_count=10, metrics=[MeasurementMetric(metric_id="loss", value=loss)])
    )
    return Trial(
        name=f"{PARENT}/hyperparameterTuningJobs/{STUDY}/trials/{trial_id}",
        id=str(trial_id),
        state=TrialState.INFEASIBLE if loss is None else TrialState.SUCCEEDED,
        parameters=[
            TrialParameter(parameter_id="lr", value=lr),
            TrialParameter(parameter_id="layers", value=layers),
            TrialParameter(parameter_id="optimizer", value=optimizer),
        ],
        final_measurement=final,
        measurements=[] if final is None else [final],
        start_time=ago(300 - 40 * trial_id),
        end_time=ago(280 - 40 * trial_id),
        infeasible_reason="no objective metric reported: loss" if loss is None else "",
        custom_job=f"{PARENT}/customJobs/{_trial_job(trial_id)}",
        stopped_early=early,
    )


def _study() -> HyperparameterTuningJob:
    return HyperparameterTuningJob(
        name=f"{PARENT}/hyperparameterTuningJobs/{STUDY}",
        display_name="resnet lr sweep",
        study_spec=StudySpec(
            metrics=[MetricSpec(metric_id="loss", goal=GoalType.MINIMIZE)],
            parameters=[
                ParameterSpec(
                    parameter_id="lr",
                    double_value_spec=DoubleValueSpec(min_value=1e-4, max_value=1e-1),
                    scale_type=ScaleType.UNIT_LOG_SCALE,
                ),
                ParameterSpec(
                    parameter_id="layers",
                    integer_value_spec=IntegerValueSpec(min_value=1, max_value=8),
                    scale_type=ScaleType.UNIT_LINEAR_SCALE,
                ),
                ParameterSpec(
                    parameter_id="optimizer",
                    categorical_value_spec=CategoricalValueSpec(values=["sgd", "adam"]),
                ),
            ],
        ),
        max_trial_count=6,
        parallel_trial_count=2,
        trial_job_spec=CustomJobSpec(
            worker_pool_specs=[
                WorkerPoolSpec(
                    machine_spec=MachineSpec(machine_type="n1-standard-4"),
                    replica_count=1,
                    container_spec=ContainerSpec(image_uri="python:3.12", command=["python"]),
                )
            ]
        ),
        trials=[_trial(t) for t in TRIALS],
        state=JobState.SUCCEEDED,
        create_time=ago(400),
        start_time=ago(390),
        end_time=ago(60),
    )


def _version(version: int, aliases: list[str], lineage: ModelLineage | None) -> Model:
    return Model(
        name=f"{PARENT}/models/{MODEL}",
        version_id=str(version),
        version_aliases=aliases,
        version_create_time=ago(3000 - 1000 * version),
        version_update_time=ago(3000 - 1000 * version),
        display_name="resnet",
        artifact_uri=f"file:///storage/models/{MODEL}/{version}/",
        container_spec=ModelContainerSpec(image_uri=f"serving:{version}"),
        create_time=ago(3000),
        update_time=ago(100),
        lineage=lineage,
    )


VERSIONS = {
    1: _version(1, ["old"], None),
    2: _version(
        2,
        ["default", "prod"],
        ModelLineage(
            training_pipeline=f"{PARENT}/trainingPipelines/900",
            hyperparameter_tuning_job=f"{PARENT}/hyperparameterTuningJobs/{STUDY}",
            custom_job=f"{PARENT}/customJobs/{_trial_job(5)}",
            run=_trial_job(5),
        ),
    ),
}


def _answer(path: str) -> tuple[int, Any]:
    """The training API's answer to a GET of ``path`` (decoded), as the contract shapes it."""
    base = f"/v1/{PARENT}"
    job = _study()
    listed = ListHyperparameterTuningJobsResponse(hyperparameter_tuning_jobs=[job])
    answers: dict[str, Any] = {
        f"{base}/hyperparameterTuningJobs": listed.model_dump(mode="json"),
        f"{base}/hyperparameterTuningJobs/{STUDY}": job.model_dump(mode="json"),
        f"{base}/models": ListModelsResponse(models=[VERSIONS[2]]).model_dump(mode="json"),
        f"{base}/models/{MODEL}": VERSIONS[2].model_dump(mode="json"),
        f"{base}/models/{MODEL}:listVersions": ListModelsResponse(
            models=list(VERSIONS.values())
        ).model_dump(mode="json"),
    }
    for number, version in VERSIONS.items():
        answers[f"{base}/models/{MODEL}@{number}"] = version.model_dump(mode="json")
    if path in answers:
        return 200, answers[path]
    missing = VertexErrorStatus(code=404, message=f"{path} not found", status="NOT_FOUND")
    return 404, VertexErrorBody(error=missing).model_dump(mode="json")


def _serve(route: Route) -> None:
    status, body = _answer(unquote(urlsplit(route.request.url).path))
    route.fulfill(status=status, content_type="application/json", body=json.dumps(body))


TRAINING_PATH = re.compile(r"^/v1/projects/[^/]+/locations/[^/]+/(hyperparameterTuningJobs|models)")


def _is_training(url: str) -> bool:
    return TRAINING_PATH.match(urlsplit(url).path) is not None


def _forward_to(base: str) -> Callable[[Route], None]:
    def forward(route: Route) -> None:
        parts = urlsplit(route.request.url)
        route.continue_(url=f"{base}{parts.path}{'?' + parts.query if parts.query else ''}")

    return forward


def _open(pages: Pages, platform: Platform, training_url: str | None = None) -> Page:
    """A signed-in page whose tuning and model calls are answered by the recorded documents,
    or forwarded to ``training_url``."""
    page = pages.open(platform.viewer, "#/runs")
    expect(page.get_by_test_id("caller-role")).to_be_visible()
    page.route(_is_training, _serve if training_url is None else _forward_to(training_url))
    return page


def _attribute(page: Page, testid: str, name: str) -> Callable[[], str | None]:
    return lambda: page.get_by_test_id(testid).get_attribute(name)


def _the_objective_goes_on_a_log_axis_and_back(page: Page) -> None:
    """The study's log toggle (y=log in the URL, as a run's charts): a diverged trial's 1e35
    would otherwise flatten the others; both plots follow."""
    objective = page.get_by_test_id("objective-plot")
    loss_axis = page.get_by_test_id("parallel-plot").locator("g.pc-axis[data-axis=loss]")
    page.get_by_test_id("study-log-scale").check()
    expect(objective).to_have_attribute("data-y-scale", "log")
    expect(loss_axis).to_have_attribute("data-kind", "log")
    expect(page).to_have_url(re.compile(r"[?&]y=log"))
    page.get_by_test_id("study-log-scale").uncheck()
    expect(objective).to_have_attribute("data-y-scale", "linear")
    expect(loss_axis).to_have_attribute("data-kind", "linear")
    expect(page).not_to_have_url(re.compile(r"y=log"))


def test_a_study_lists_draws_its_trials_and_compares_two(platform: Platform, pages: Pages) -> None:
    for trial_id in (2, 5):
        platform.create_run(_trial_job(trial_id), f"trial {trial_id}", runSet="resnet lr sweep")
    page = _open(pages, platform)
    page.get_by_test_id("nav-tuning").click()
    expect(page).to_have_url(re.compile(r"#/tuning$"))
    row = page.locator(f'tr[data-job-id="{STUDY}"]')
    expect(row.get_by_test_id("job-state")).to_have_text("SUCCEEDED")
    expect(row.get_by_test_id("study-trials")).to_contain_text("5 / 6")
    expect(row.get_by_test_id("study-trials")).to_contain_text("1 infeasible")
    expect(row.get_by_test_id("study-best")).to_have_attribute("data-value", "0.2")
    expect(row.get_by_test_id("study-best")).to_contain_text("loss · min · trial 5")

    row.get_by_test_id("study-link").click()
    expect(page.get_by_test_id("study-name")).to_have_text("resnet lr sweep")
    objective = page.get_by_test_id("objective-plot")
    expect(objective).to_have_attribute("data-points", "4")  # trial 3 has no value
    expect(objective).to_have_attribute("data-best", "0.2")
    expect(objective).to_have_attribute("data-best-trial", "5")
    expect(objective.locator("circle.point.record")).to_have_count(3)  # 0.8, 0.4, 0.2
    expect(objective.get_by_test_id("best-line")).to_have_count(1)

    parallel = page.get_by_test_id("parallel-plot")
    expect(parallel).to_have_attribute("data-axes", "4")
    expect(parallel).to_have_attribute("data-lines", "5")
    kinds = {
        axis.get_attribute("data-axis"): axis.get_attribute("data-kind")
        for axis in parallel.locator("g.pc-axis").all()
    }
    assert kinds == {"lr": "log", "layers": "linear", "optimizer": "category", "loss": "linear"}
    expect(parallel.locator("g[data-axis=optimizer] .tick text")).to_have_text(["sgd", "adam"])
    # The best trial's line takes the ramp's best colour; the infeasible one is dashed grey.
    expect(parallel.locator('path[data-trial-id="5"]')).to_have_attribute("stroke", "#1d4ed8")
    expect(parallel.locator('path[data-trial-id="3"]')).to_have_class(re.compile("no-objective"))
    _the_objective_goes_on_a_log_axis_and_back(page)

    trials = page.get_by_test_id("trials-table")
    expect(trials.locator("tr[data-trial-id]")).to_have_count(5)
    expect(trials.locator('tr[data-trial-id="4"]').get_by_test_id("stopped-early")).to_be_visible()
    expect(trials.get_by_test_id("stopped-early")).to_have_count(1)
    infeasible = trials.locator('tr[data-trial-id="3"]')
    expect(infeasible.get_by_test_id("trial-state")).to_have_text("INFEASIBLE")
    expect(infeasible.get_by_test_id("infeasible-reason")).to_contain_text("no objective metric")
    best = trials.locator('tr[data-trial-id="5"]')
    expect(best.get_by_test_id("best-trial")).to_be_visible()
    expect(best.locator('td[data-parameter="lr"]')).to_have_text("0.003")
    expect(best.get_by_test_id("trial-run-link")).to_have_attribute(
        "href", f"#/runs/{_trial_job(5)}"
    )

    compare = page.get_by_test_id("compare-trials")
    expect(compare).to_have_class(re.compile("disabled"))
    trials.locator('tr[data-trial-id="5"]').get_by_test_id("trial-select").check()
    # A click on a trial's line in the plot picks it too.
    parallel.locator('path[data-trial-id="2"]').dispatch_event("click")
    expect(trials.locator('tr[data-trial-id="2"]').get_by_test_id("trial-select")).to_be_checked()
    expect(compare).to_have_attribute("href", f"#/compare?runs={_trial_job(2)},{_trial_job(5)}")
    compare.click()
    listed = page.get_by_test_id("compare-runs")
    expect(listed.locator("li[data-run-id]")).to_have_count(2)
    expect(listed).to_contain_text("trial 5")


def test_models_list_and_a_models_versions_with_lineage(platform: Platform, pages: Pages) -> None:
    page = _open(pages, platform)
    page.get_by_test_id("nav-models").click()
    expect(page).to_have_url(re.compile(r"#/models$"))
    row = page.locator(f'tr[data-model-id="{MODEL}"]')
    expect(row.get_by_test_id("model-default-version")).to_have_text("2")
    expect(row.get_by_test_id("model-aliases")).to_have_text("prod")

    row.get_by_test_id("model-link").click()
    expect(page.get_by_test_id("model-name")).to_have_text("resnet")
    expect(page.get_by_test_id("default-version")).to_have_text("2")
    versions = page.get_by_test_id("versions-table")
    expect(versions.locator("tr[data-version-id]")).to_have_count(2)
    expect(versions.locator("tr[data-version-id]").first).to_have_attribute("data-version-id", "2")
    newest = versions.locator('tr[data-version-id="2"]')
    expect(newest.get_by_test_id("version-default")).to_be_visible()
    expect(newest.get_by_test_id("version-artifact")).to_have_text(
        f"file:///storage/models/{MODEL}/2/"
    )
    expect(newest.get_by_test_id("version-image")).to_have_text("serving:2")
    links = newest.get_by_test_id("lineage-link")
    expect(links).to_have_count(4)
    expect(newest.locator("[data-kind=pipeline] a")).to_have_count(0)  # no pipelines page
    expect(newest.locator("[data-kind=run] a")).to_have_attribute("href", f"#/runs/{_trial_job(5)}")
    oldest = versions.locator('tr[data-version-id="1"]')
    expect(oldest.get_by_test_id("version-aliases")).to_have_text("old")
    expect(oldest.get_by_test_id("version-lineage")).to_contain_text("no lineage")

    oldest.click()
    expect(page).to_have_url(re.compile(r"version=1$"))
    expect(page.get_by_test_id("version-detail")).to_contain_text("Version 1")

    newest.locator("[data-kind=tuningJob] a").click()
    expect(page.get_by_test_id("study-name")).to_have_text("resnet lr sweep")


@pytest.fixture(scope="module")
def real_training(platform: Platform) -> Iterator[str]:
    """The training service itself, on the platform's bus and database (no executor)."""
    services = platform.services
    assert services is not None
    settings = TrainingSettings(
        nats=services.nats,
        database=services.database,
        db_schema=f"tm_{services.tag}",
        storage=services.storage,
        public_api_url=platform.api_url,
    )
    with served_in_thread(create_training(settings)) as url:
        yield url


def test_the_real_training_api_a_study_with_active_trials_and_an_uploaded_model(
    platform: Platform, pages: Pages, real_training: str, tmp_path: Path
) -> None:
    study = _study().model_copy(
        update={"display_name": "console real study", "trials": [], "state": JobState.UNSPECIFIED}
    )
    body = study.model_dump(mode="json", exclude_defaults=True)
    for output in ("name", "createTime", "startTime", "endTime"):
        body.pop(output, None)
    files = tmp_path / "model"
    files.mkdir()
    (files / "saved_model.pb").write_bytes(b"weights")
    upload = {
        "model": {
            "displayName": "console real model",
            "artifactUri": files.as_uri(),
            "containerSpec": {"imageUri": "serving:real"},
        }
    }
    base = f"{real_training}/v1/{PARENT}"
    with platform.as_bearer(platform.editor) as client:
        created = client.post(f"{base}/hyperparameterTuningJobs", json=body)
        assert created.status_code == 200, created.text
        job_id = created.json()["name"].rsplit("/", 1)[-1]
        uploaded = client.post(f"{base}/models:upload", json=upload)
        assert uploaded.status_code == 200, uploaded.text
        model_id = uploaded.json()["response"]["model"].rsplit("/", 1)[-1]

        def active() -> list[dict[str, Any]] | None:
            trials = client.get(f"{base}/hyperparameterTuningJobs/{job_id}").json().get("trials")
            return trials if trials and len(trials) == 2 else None

        trials = wait_for(active, "the study's first two trials (parallelTrialCount)")

    page = _open(pages, platform, real_training)
    page.evaluate(f"() => {{ location.hash = '#/tuning/{job_id}'; }}")
    expect(page.get_by_test_id("study-name")).to_have_text("console real study")
    table = page.get_by_test_id("trials-table")
    expect(table.locator("tr[data-trial-id]")).to_have_count(2)
    for trial in trials:
        row = table.locator(f'tr[data-trial-id="{trial["id"]}"]')
        expect(row.get_by_test_id("trial-state")).to_have_text("ACTIVE")
        lr = next(p["value"] for p in trial["parameters"] if p["parameterId"] == "lr")
        assert 1e-4 <= lr <= 1e-1
        expect(row.locator('td[data-parameter="optimizer"]')).to_have_text(
            re.compile("^(sgd|adam)$")
        )
        job = trial["customJob"].rsplit("/", 1)[-1]
        expect(row.get_by_test_id("trial-run-link")).to_have_attribute("href", f"#/runs/{job}")
    expect(page.get_by_test_id("study-trials")).to_contain_text("0 / 6 done, 2 running")
    expect(page.get_by_test_id("parallel-plot")).to_have_attribute("data-lines", "2")
    expect(page.get_by_test_id("objective-plot")).to_have_attribute("data-points", "0")
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "polling")

    page.evaluate(f"() => {{ location.hash = '#/models/{model_id}'; }}")
    expect(page.get_by_test_id("model-name")).to_have_text("console real model")
    version = page.locator('[data-testid=versions-table] tr[data-version-id="1"]')
    expect(version.get_by_test_id("version-default")).to_be_visible()
    expect(version.get_by_test_id("version-artifact")).to_contain_text(files.as_uri())
    expect(version.get_by_test_id("version-image")).to_have_text("serving:real")
    expect(version.get_by_test_id("version-lineage")).to_contain_text("no lineage")

    with platform.as_bearer(platform.editor) as client:
        cancelled = client.post(f"{base}/hyperparameterTuningJobs/{job_id}:cancel", json={})
        assert cancelled.status_code == 200, cancelled.text

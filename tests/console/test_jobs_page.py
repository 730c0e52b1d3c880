"""The Jobs pages (console/src/pages/jobs.ts, job.ts, joblogs.ts) in a real browser.

Proves: the nav's Jobs entry lists jobs with their state badges, pools (machine x replicas)
and durations, and follows a job that changes and a job that appears without a reload; a job's
page shows its spec, its replicas (attempts, exit codes, messages) and a replica's log,
followed live while it runs, another replica's on request, links to its run, and stops
refreshing once the job has ended; an editor cancels a running job (a viewer gets no button);
a failed job shows its error; a missing job, an empty location and a training API that is
not there (no route, or no answer) each say so instead of leaving a blank page.

The training API here is mostly ``fake_training`` (recorded jobs built from the contract's
models: states, replicas and logs a test can set at will); the last test serves the real
training service beside the registry (no executor: its job stays queued) and takes a job
from creation through the registry's run to a cancel in the console. Either is reached on
the console's origin through a Playwright route, as through the edge of ``mldiag up``;
run-registry, the console and its runs are the real ones of ``conftest``.
"""

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, Route, expect

from console.fake_training import Recorded, ago, create_fake_training
from console.helpers import Pages, Platform, wait_for
from mldiag_schemas.jobs import (
    AcceleratorType,
    ContainerSpec,
    CustomJob,
    CustomJobSpec,
    EnvVar,
    JobState,
    MachineSpec,
    PythonPackageSpec,
    Replica,
    ReplicaState,
    RpcStatus,
    Scheduling,
    WorkerPoolSpec,
)
from mldiag_training.app import create_app as create_training
from mldiag_training.settings import TrainingSettings
from support import free_port, served_in_thread

pytestmark = pytest.mark.e2e

PARENT = "projects/default/locations/local"
X = "\N{MULTIPLICATION SIGN}"  # how the console writes machine x replicas
RUNNING, DONE, FAILED, QUEUED, CANCEL_ME, ENDS = "1001", "1002", "1003", "1004", "1005", "1006"


def _container_job(job_id: str, name: str, state: JobState, **fields: object) -> CustomJob:
    """Two pools: a chief and two accelerated workers running a container command."""
    chief = WorkerPoolSpec(
        machine_spec=MachineSpec(machine_type="n1-standard-8"),
        replica_count=1,
        container_spec=ContainerSpec(
            image_uri="python:3.12",
            command=["python", "-m", "trainer"],
            args=["--epochs", "3", "--note", "two words"],
            env=[EnvVar(name="LR", value="0.1")],
        ),
    )
    workers = WorkerPoolSpec(
        machine_spec=MachineSpec(
            machine_type="n1-standard-4",
            accelerator_type=AcceleratorType.NVIDIA_L4,
            accelerator_count=1,
        ),
        replica_count=2,
        container_spec=ContainerSpec(image_uri="python:3.12", command=["python", "-m", "trainer"]),
    )
    return CustomJob(
        name=f"{PARENT}/customJobs/{job_id}",
        display_name=name,
        job_spec=CustomJobSpec(
            worker_pool_specs=[chief, workers],
            scheduling=Scheduling(timeout=3600, restart_job_on_worker_restart=True),
        ),
        state=state,
        create_time=ago(120),
        update_time=ago(5),
        labels={"team": "vision"},
        **fields,  # output fields of the recorded job
    )


def _replica(name: str, state: ReplicaState, attempt: int = 0, **fields: object) -> Replica:
    pool, index = (int(part) for part in name.removeprefix("workerpool").split("-"))
    return Replica(
        name=name,
        pool=pool,
        index=index,
        attempt=attempt,
        state=state,
        executor="local-a",
        host="host-a",
        start_time=ago(60),
        **fields,
    )


def _running_replicas() -> list[Replica]:
    return [
        _replica("workerpool0-0", ReplicaState.RUNNING),
        _replica(
            "workerpool1-0",
            ReplicaState.RUNNING,
            attempt=1,
            message="attempt 0 exited 1; restarted",
        ),
        _replica("workerpool1-1", ReplicaState.RUNNING),
    ]


def _record(recorded: Recorded) -> None:
    recorded.add(
        _container_job(RUNNING, "resnet distributed", JobState.RUNNING, start_time=ago(90)),
        _running_replicas(),
        {"workerpool0-0": "epoch 1 loss 0.90\n", "workerpool1-0": "worker 1 says hello\n"},
    )
    package = PythonPackageSpec(
        executor_image_uri="python:3.12",
        package_uris=["gs://bucket/trainer-0.1.tar.gz"],
        python_module="trainer.task",
        args=["--lr", "0.01"],
    )
    recorded.add(
        CustomJob(
            name=f"{PARENT}/customJobs/{DONE}",
            display_name="bert finetune",
            job_spec=CustomJobSpec(
                worker_pool_specs=[WorkerPoolSpec(replica_count=1, python_package_spec=package)]
            ),
            state=JobState.SUCCEEDED,
            create_time=ago(600),
            start_time=ago(590),
            end_time=ago(290),
        ),
        [_replica("workerpool0-0", ReplicaState.SUCCEEDED, exit_code=0, end_time=ago(290))],
        {"workerpool0-0": "done\n"},
    )
    recorded.add(
        _container_job(
            FAILED,
            "too slow",
            JobState.FAILED,
            start_time=ago(100),
            end_time=ago(40),
            error=RpcStatus(code=4, message="the job ran past its timeout of 60s"),
        ),
        [_replica("workerpool0-0", ReplicaState.CANCELLED, exit_code=-15, message="timeout")],
        {},
    )
    recorded.add(_container_job(QUEUED, "waits for capacity", JobState.QUEUED), [], {})
    recorded.add(
        _container_job(CANCEL_ME, "cancel me", JobState.RUNNING, start_time=ago(30)),
        _running_replicas(),
        {"workerpool0-0": "step 1\n"},
    )
    recorded.add(
        _container_job(ENDS, "ends while watched", JobState.RUNNING, start_time=ago(30)),
        _running_replicas(),
        {"workerpool0-0": "starting\n"},
    )


@pytest.fixture(scope="module")
def training(platform: Platform) -> Iterator[tuple[str, Recorded]]:
    """The fake training API, served, with its recorded jobs; the running job has its run."""
    recorded = Recorded()
    _record(recorded)
    platform.create_run(RUNNING, "resnet distributed", runSet="training-jobs")
    with served_in_thread(create_fake_training(recorded)) as url:
        try:
            yield url, recorded
        finally:
            recorded.end_all()  # no followed log holds the server open


def _forward_to(base: str) -> Callable[[Route], None]:
    def forward(route: Route) -> None:
        parts = urlsplit(route.request.url)
        route.continue_(url=f"{base}{parts.path}{'?' + parts.query if parts.query else ''}")

    return forward


def _is_training(url: str) -> bool:
    return "/customJobs" in urlsplit(url).path


def _open(pages: Pages, token: str, hash_route: str, training_url: str | None) -> Page:
    """A signed-in page whose training calls reach ``training_url`` (None: nothing routes
    them, so the registry answers), then at ``hash_route``."""
    page = pages.open(token, "#/runs")
    expect(page.get_by_test_id("caller-role")).to_be_visible()
    if training_url is not None:
        page.route(_is_training, _forward_to(training_url))
    page.evaluate("(hash) => { location.hash = hash; }", hash_route)
    return page


def _now() -> datetime:
    return datetime.now(UTC)


def test_the_jobs_list_shows_states_and_pools_and_follows_changes_live(
    platform: Platform, pages: Pages, training: tuple[str, Recorded]
) -> None:
    url, recorded = training
    page = _open(pages, platform.viewer, "#/runs", url)
    page.get_by_test_id("nav-jobs").click()
    expect(page).to_have_url(re.compile(r"#/jobs$"))
    row = page.locator(f'tr[data-job-id="{RUNNING}"]')
    expect(row.get_by_test_id("job-state")).to_have_text("RUNNING")
    expect(row).to_contain_text("resnet distributed")
    pools = row.get_by_test_id("job-pools")
    expect(pools).to_contain_text(f"n1-standard-8 {X} 1")
    expect(pools).to_contain_text(f"n1-standard-4 + 1 {X} NVIDIA_L4 {X} 2")
    expect(row.get_by_test_id("job-duration")).to_contain_text(re.compile(r"1m \d+s"))
    for job_id, badge in [(DONE, "SUCCEEDED"), (FAILED, "FAILED"), (QUEUED, "QUEUED")]:
        expect(page.locator(f'tr[data-job-id="{job_id}"] [data-testid=job-state]')).to_have_text(
            badge
        )
    expect(page.locator(f'tr[data-job-id="{DONE}"]')).to_contain_text(f"n1-standard-4 {X} 1")
    expect(page.locator(f'tr[data-job-id="{QUEUED}"]')).to_contain_text("not started")
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "polling")

    recorded.update(QUEUED, state=JobState.PENDING)
    expect(page.locator(f'tr[data-job-id="{QUEUED}"]')).to_have_attribute(
        "data-state", "JOB_STATE_PENDING"
    )
    recorded.add(_container_job("1099", "arrives later", JobState.QUEUED), [], {})
    expect(page.locator('tr[data-job-id="1099"]')).to_contain_text("arrives later")
    expect(page.locator("tr[data-job-id]").first).to_have_attribute("data-job-id", "1099")

    page.locator(f'tr[data-job-id="{RUNNING}"] [data-testid=job-link]').click()
    expect(page.get_by_test_id("job-name")).to_have_text("resnet distributed")


def test_a_job_shows_its_spec_replicas_and_a_followed_log_and_links_to_its_run(
    platform: Platform, pages: Pages, training: tuple[str, Recorded]
) -> None:
    url, recorded = training
    page = _open(pages, platform.viewer, f"#/jobs/{RUNNING}", url)
    header = page.get_by_test_id("job-header")
    expect(header.get_by_test_id("job-state")).to_have_text("RUNNING")
    expect(page.get_by_test_id("cancel-job")).to_have_count(0)  # a viewer may not cancel

    chief = page.locator('[data-testid=pool][data-pool="0"]')
    expect(chief.get_by_test_id("pool-machine")).to_have_text(f"n1-standard-8 {X} 1")
    expect(chief.get_by_test_id("pool-image")).to_have_text("python:3.12")
    expect(chief.get_by_test_id("pool-command")).to_have_text("python -m trainer")
    expect(chief.get_by_test_id("pool-args")).to_have_text("--epochs 3 --note 'two words'")
    expect(chief).to_contain_text("LR=0.1")
    expect(page.get_by_test_id("job-spec")).to_contain_text("every replica when one restarts")

    replicas = page.locator("[data-testid=replicas-table] tbody tr[data-replica]")
    expect(replicas).to_have_count(3)
    restarted = page.locator('tr[data-replica="workerpool1-0"]')
    expect(restarted.get_by_test_id("replica-attempt")).to_have_text("1")
    expect(restarted.get_by_test_id("replica-message")).to_have_text(
        "attempt 0 exited 1; restarted"
    )
    expect(restarted).to_contain_text("local-a")

    log = page.get_by_test_id("log-view")
    expect(log).to_have_text("epoch 1 loss 0.90\n")
    expect(page.get_by_test_id("log-status")).to_have_attribute("data-mode", "following")
    recorded.log(RUNNING, "workerpool0-0", "epoch 2 loss 0.70\n")
    expect(log).to_have_text("epoch 1 loss 0.90\nepoch 2 loss 0.70\n")

    page.get_by_test_id("log-replica").select_option("workerpool1-0")
    expect(log).to_have_text("worker 1 says hello\n")
    assert "replica=workerpool1-0" in page.url
    page.get_by_test_id("log-replica").select_option("workerpool1-1")
    expect(page.get_by_test_id("log-status")).to_have_attribute("data-mode", "waiting")

    expect(page.get_by_test_id("run-events-link")).to_have_attribute(
        "href", f"#/runs/{RUNNING}/events"
    )
    page.get_by_test_id("run-metrics-link").click()
    expect(page.get_by_test_id("run-name")).to_have_text("resnet distributed")
    expect(page).to_have_url(re.compile(f"#/runs/{RUNNING}/metrics$"))


def test_a_job_that_ends_while_watched_stops_refreshing(
    platform: Platform, pages: Pages, training: tuple[str, Recorded]
) -> None:
    url, recorded = training
    page = _open(pages, platform.viewer, f"#/jobs/{ENDS}", url)
    gets: list[str] = []
    page.on(
        "request",
        lambda request: (
            gets.append(request.url)
            if urlsplit(request.url).path.endswith(f"/customJobs/{ENDS}")
            else None
        ),
    )
    expect(page.get_by_test_id("log-view")).to_have_text("starting\n")
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "polling")

    recorded.log(ENDS, "workerpool0-0", "finished\n")
    recorded.set_replicas(
        ENDS,
        [
            _replica(r.name, ReplicaState.SUCCEEDED, exit_code=0, end_time=_now())
            for r in _running_replicas()
        ],
    )
    recorded.update(ENDS, state=JobState.SUCCEEDED, end_time=_now())
    expect(page.get_by_test_id("job-header").get_by_test_id("job-state")).to_have_text("SUCCEEDED")
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "idle")
    expect(
        page.locator('tr[data-replica="workerpool0-0"] [data-testid=replica-exit]')
    ).to_have_text("0")
    expect(page.get_by_test_id("log-status")).to_have_attribute("data-mode", "ended")
    expect(page.get_by_test_id("log-view")).to_have_text("starting\nfinished\n")
    seen = len(gets)
    page.wait_for_timeout(2500)  # more than one polling interval
    assert len(gets) == seen, gets[seen:]


def test_an_editor_cancels_a_running_job(
    platform: Platform, pages: Pages, training: tuple[str, Recorded]
) -> None:
    url, recorded = training
    page = _open(pages, platform.editor, f"#/jobs/{CANCEL_ME}", url)
    state = page.get_by_test_id("job-header").get_by_test_id("job-state")
    expect(state).to_have_text("RUNNING")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("cancel-job").click()
    expect(state).to_have_text("CANCELLING")
    assert recorded.cancels == [platform.editor]  # the console's own token, same origin
    expect(page.get_by_test_id("cancel-job")).to_have_count(0)  # already on its way

    recorded.update(
        CANCEL_ME,
        state=JobState.CANCELLED,
        end_time=_now(),
        error=RpcStatus(code=1, message="cancelled by the user"),
    )
    expect(state).to_have_text("CANCELLED")
    expect(page.get_by_test_id("job-error")).to_have_text("CANCELLED cancelled by the user")


def test_a_failed_job_shows_its_error_and_a_missing_job_says_so(
    platform: Platform, pages: Pages, training: tuple[str, Recorded]
) -> None:
    url, _ = training
    page = _open(pages, platform.viewer, f"#/jobs/{FAILED}", url)
    expect(page.get_by_test_id("job-error")).to_have_text(
        "DEADLINE_EXCEEDED the job ran past its timeout of 60s"
    )
    expect(page.locator('tr[data-replica="workerpool0-0"]')).to_have_attribute(
        "data-state", "CANCELLED"
    )
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "idle")
    expect(page.get_by_test_id("log-status")).to_have_attribute("data-mode", "ended")

    page.evaluate("() => { location.hash = '#/jobs/424242'; }")
    expect(page.get_by_test_id("error")).to_have_attribute("data-code", "NOT_FOUND")
    expect(page.get_by_test_id("jobs-unavailable")).to_have_count(0)


def test_an_empty_location_and_a_missing_training_api_say_so(
    platform: Platform, pages: Pages, training: tuple[str, Recorded]
) -> None:
    url, _ = training
    page = _open(pages, platform.viewer, "#/jobs?location=us-central1", url)
    expect(page.get_by_test_id("jobs-empty")).to_contain_text(
        "projects/default/locations/us-central1"
    )
    expect(page.get_by_test_id("jobs-location")).to_have_value("us-central1")

    # The registry alone: nothing routes the training API, so its 404 is not a job's.
    page.unroute(_is_training)
    page.evaluate("() => { location.hash = '#/jobs'; }")
    notice = page.get_by_test_id("jobs-unavailable")
    expect(notice).to_contain_text("does not serve the training API")
    expect(notice.get_by_test_id("error")).to_have_attribute("data-code", "not_found")

    # A training API that does not answer at all.
    page.route(_is_training, _forward_to(f"http://127.0.0.1:{free_port()}"))
    page.evaluate(f"() => {{ location.hash = '#/jobs/{RUNNING}'; }}")
    expect(page.get_by_test_id("jobs-unavailable")).to_contain_text("did not answer")
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "retrying")


@pytest.fixture(scope="module")
def real_training(platform: Platform) -> Iterator[str]:
    """The training service itself, on the platform's bus and database (no executor)."""
    services = platform.services
    assert services is not None
    settings = TrainingSettings(
        nats=services.nats,
        database=services.database,
        db_schema=f"t_{services.tag}",
        storage=services.storage,
        public_api_url=platform.api_url,
    )
    with served_in_thread(create_training(settings)) as url:
        yield url


def test_the_real_training_api_a_queued_job_its_run_and_a_cancel(
    platform: Platform, pages: Pages, real_training: str
) -> None:
    pool = WorkerPoolSpec(
        machine_spec=MachineSpec(machine_type="n1-standard-4"),
        replica_count=1,
        container_spec=ContainerSpec(image_uri="python:3.12", command=["python", "-c", "1"]),
    )
    job = CustomJob(
        display_name="console real job", job_spec=CustomJobSpec(worker_pool_specs=[pool])
    )
    with platform.as_bearer(platform.editor) as client:
        created = client.post(
            f"{real_training}/v1/{PARENT}/customJobs",
            json=job.model_dump(mode="json", exclude_defaults=True),
        )
    assert created.status_code == 200, created.text
    job_id = created.json()["name"].rsplit("/", 1)[-1]

    page = _open(pages, platform.editor, "#/jobs", real_training)
    row = page.locator(f'tr[data-job-id="{job_id}"]')
    expect(row.get_by_test_id("job-state")).to_have_text("QUEUED")  # no executor anywhere
    expect(row.get_by_test_id("job-pools")).to_have_text(f"n1-standard-4 {X} 1")
    row.get_by_test_id("job-link").click()
    expect(page.get_by_test_id("job-name")).to_have_text("console real job")
    expect(page.get_by_test_id("pool-command")).to_have_text("python -c 1")
    expect(page.get_by_test_id("replicas-table")).to_contain_text("No replica placed yet")
    expect(page.get_by_test_id("log-status")).to_have_attribute("data-mode", "following")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("cancel-job").click()
    state = page.get_by_test_id("job-header").get_by_test_id("job-state")
    expect(state).to_have_text("CANCELLED")
    expect(page.get_by_test_id("live")).to_have_attribute("data-state", "idle")
    expect(page.get_by_test_id("log-status")).to_have_attribute("data-mode", "ended")

    # The job's run, created by run-registry from the job: the link opens it.
    wait_for(
        lambda: platform.api.get(f"/v1/machineLearningRuns/{job_id}").status_code == 200,
        "the job's run",
    )
    page.get_by_test_id("run-metrics-link").click()
    expect(page.get_by_test_id("run-name")).to_have_text("console real job")
    page.get_by_test_id("run-job-link").click()  # and back, from the run to its job
    expect(page.get_by_test_id("job-name")).to_have_text("console real job")

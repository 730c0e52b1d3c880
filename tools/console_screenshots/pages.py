"""The pictures: each page opened in headless Chromium once what it shows has drawn."""

from pathlib import Path

from playwright.sync_api import BrowserContext, Page, expect

MAX_PNG_BYTES = 200_000

expect.set_options(timeout=60_000)  # a page waits on real services here, not on fixtures


class Camera:
    """Takes the pictures into ``out``, each checked for its size."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)

    def snap(self, page: Page, name: str) -> None:
        """``<out>/<name>.png`` of the viewport, with no hover state in it."""
        page.mouse.move(0, 0)  # no hover state or chart cursor in the picture
        page.wait_for_timeout(400)  # let a last redraw land
        path = self.out / f"{name}.png"
        page.screenshot(path=str(path))
        size = path.stat().st_size
        print(f"{path}: {size:,} bytes")  # noqa: T201  # a tool's report
        if size > MAX_PNG_BYTES:
            raise RuntimeError(f"{path} is {size:,} bytes, over {MAX_PNG_BYTES:,}")


def runs(camera: Camera, page: Page, console: str, baseline: str, unstable: str) -> None:
    """The runs table; the baseline's metrics; the two runs compared on a log y axis."""
    page.goto(console + "#/runs?runSet=mlp-sine")  # the SDK's runs and the jobs' runs
    expect(page.locator(f'tr[data-run-id="{unstable}"]')).to_be_visible()
    camera.snap(page, "runs")

    page.goto(console + f"#/runs/{baseline}/metrics?smooth=0.6")
    for metric in ("loss", "learning_rate", "gradient_norm", "step_time"):
        chart = page.locator(f'[data-testid=chart][data-metric={metric}][data-ready="true"]')
        expect(chart).to_be_visible()
    camera.snap(page, "run-metrics")

    # On a log axis: the diverged run's values would flatten the baseline's otherwise.
    page.goto(console + f"#/compare?runs={baseline},{unstable}&y=log")
    chart = page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')
    expect(chart).to_be_visible()
    camera.snap(page, "compare")


def _scroll_to(page: Page, selector: str) -> None:
    page.locator(selector).first.evaluate(
        "el => window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - 56)"
    )


def event(camera: Camera, page: Page, console: str, unstable: str, event_id: str) -> None:
    """The unstable run's events with the non-finite loss event open."""
    page.goto(console + f"#/runs/{unstable}/events?event={event_id}")
    detail = page.get_by_test_id("event-detail")
    expect(detail.locator("[data-testid=analyzer-report]").first).to_be_visible()
    _scroll_to(page, ".events-tab")
    camera.snap(page, "run-events")


def job(camera: Camera, page: Page, console: str, job_id: str) -> None:
    """The jobs list, then one job with its replicas and its chief's log."""
    page.goto(console + "#/jobs")
    expect(page.locator(f'tr[data-job-id="{job_id}"]')).to_be_visible()
    camera.snap(page, "jobs")

    page.goto(console + f"#/jobs/{job_id}")
    expect(page.locator("[data-testid=replicas-table] tbody tr[data-replica]")).to_have_count(1)
    expect(page.get_by_test_id("log-view")).to_contain_text("step  200/")
    camera.snap(page, "job")


def study(camera: Camera, page: Page, console: str, study_id: str) -> None:
    """The tuning jobs, then the study: objective over trials, parallel coordinates, trials."""
    page.goto(console + "#/tuning")
    row = page.locator(f'tr[data-job-id="{study_id}"]')
    expect(row.get_by_test_id("job-state")).to_have_text("SUCCEEDED")
    camera.snap(page, "tuning")

    page.goto(console + f"#/tuning/{study_id}")
    expect(page.get_by_test_id("objective-plot")).to_have_attribute("data-points", "6")
    expect(page.get_by_test_id("parallel-plot")).to_have_attribute("data-lines", "6")
    camera.snap(page, "study")


def models(camera: Camera, page: Page, console: str, model_id: str) -> None:
    """The registry's models, then the model's versions with aliases and lineage."""
    page.goto(console + "#/models")
    row = page.locator(f'tr[data-model-id="{model_id}"]')
    expect(row.get_by_test_id("model-default-version")).to_have_text("2")
    camera.snap(page, "models")

    page.goto(console + f"#/models/{model_id}")
    versions = page.get_by_test_id("versions-table")
    expect(versions.locator("tr[data-version-id]")).to_have_count(2)
    expect(versions.get_by_test_id("lineage-link").first).to_be_visible()
    camera.snap(page, "model")


def shared(
    camera: Camera, signed_out: BrowserContext, console: str, run_token: str, event_token: str
) -> None:
    """A run and an event opened through their share links, in a browser never signed in."""
    page = signed_out.new_page()
    page.goto(console + f"#/share/{run_token}")
    expect(page.get_by_test_id("shared-banner")).to_have_attribute("data-kind", "RUN")
    page.get_by_test_id("tab-metrics").click()
    expect(page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')).to_be_visible()
    camera.snap(page, "shared-run")

    page.goto(console + f"#/share/{event_token}")
    expect(page.get_by_test_id("shared-banner")).to_have_attribute("data-kind", "EVENT")
    expect(page.get_by_test_id("analyzer-report").first).to_be_visible()
    camera.snap(page, "shared-event")
    page.close()


def profiles(camera: Camera, page: Page, console: str, job_id: str) -> None:
    """The JAX job's profiles tab after a capture taken with the page's own form."""
    page.goto(console + f"#/runs/{job_id}/profiles")
    page.get_by_test_id("capture-button").click()
    form = page.get_by_test_id("capture-form")
    form.get_by_test_id("capture-duration").fill("1000")
    form.get_by_test_id("capture-submit").click()
    status = page.locator('[data-testid=capture-status][data-state="SUCCEEDED"]')
    expect(status).to_be_visible(timeout=120_000)
    session_id = (status.text_content() or "").rsplit(" ", 1)[-1]
    row = page.locator(f'tr[data-session-id="{session_id}"]')
    expect(row).to_have_attribute("data-phase", "SUCCEEDED")
    row.click()
    expect(page.get_by_test_id("session-detail")).to_be_visible()
    camera.snap(page, "run-profiles")

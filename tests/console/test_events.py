"""A run's events page (pages/events.ts): detected events on the timeline, with their reports.

Proves: a NaN loss becomes an event on the run's events page, and its detail shows the
analyzers' reports (the run's loss chart marks the same NaNs); the events timeline spans the
run even when every point came in one batch (one time on the axis).
"""

import math
from typing import Any

import pytest
from playwright.sync_api import expect

from console.helpers import UNSTABLE, Pages, Platform, loss_curve, series, wait_for

pytestmark = pytest.mark.e2e


def test_a_nan_loss_is_an_event_on_the_timeline_with_its_reports(
    platform: Platform, pages: Pages, unstable_event: dict[str, Any]
) -> None:
    event_id = unstable_event["eventId"]
    page = pages.open(platform.viewer, f"#/runs/{UNSTABLE}/events")
    marker = page.locator(f'[data-testid=event-marker][data-event-id="{event_id}"]')
    expect(marker).to_be_visible()
    expect(marker).to_contain_text("NUMERICAL_INSTABILITY")
    timeline = page.locator('[data-testid=chart][data-metric=step_time][data-ready="true"]')
    expect(
        timeline.locator(f'[data-testid=event-span][data-event-id="{event_id}"]')
    ).to_be_visible()
    marker.click()
    detail = page.get_by_test_id("event-detail")
    expect(detail).to_have_attribute("data-event-id", event_id)
    assert f"event={event_id}" in page.url
    expect(detail.get_by_test_id("evidence")).to_contain_text("step 41")
    # The analysis may land after the page loaded: the live stream brings it in.
    report = detail.locator(
        "[data-testid=analyzer-report][data-analyzer=numerical-instability]"
        "[data-detection=DETECTED]"
    )
    expect(report).to_be_visible(timeout=30_000)
    expect(detail.get_by_test_id("probable-cause")).not_to_have_text("none found")
    assert detail.get_by_test_id("recommended-action").count() >= 1
    # The timeline, the list and the detail down to its first report in the picture.
    page.locator(".events-tab").evaluate(
        "tab => window.scrollTo(0, tab.getBoundingClientRect().top + window.scrollY - 56)"
    )

    # The same NaNs on the run's loss chart: marked, and counted on its badge.
    page.get_by_test_id("tab-metrics").click()
    loss = page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')
    expect(loss.get_by_test_id("nan-badge")).to_be_visible()
    assert int(loss.get_attribute("data-nan-buckets") or 0) >= 1


def test_a_timeline_drawn_from_one_batch_spans_the_run_not_years(
    platform: Platform, pages: Pages
) -> None:
    # A job that sent everything in one batch: every point stamped with one receipt time. A
    # lone x on uPlot's time scale used to widen the axis to 1000 days, squeezing the run and
    # its events into a sliver at the left edge.
    platform.create_run("burst", "one batch")
    steps = range(1, 31)
    platform.write(
        "burst",
        series("step_time", steps, [0.2] * len(steps)),
        series("loss", range(1, 32), [*loss_curve(steps), math.nan]),
    )

    def event_id() -> str | None:
        events = platform.get("/v1/machineLearningRuns/burst/monitoredEvents")["events"]
        return next((e["eventId"] for e in events if e["type"] == "NUMERICAL_INSTABILITY"), None)

    found = wait_for(event_id, "NUMERICAL_INSTABILITY event of the burst run")
    page = pages.open(platform.viewer, "#/runs/burst/events")
    timeline = page.locator('[data-testid=chart][data-metric=step_time][data-ready="true"]')
    span = timeline.locator(f'[data-testid=event-span][data-event-id="{found}"]')
    expect(span).to_be_visible()
    over = timeline.locator(".u-over").bounding_box()
    where = span.bounding_box()
    assert over and where
    # The open event runs from its first NaN (just after the run's creation) until now: most
    # of the run's life, so most of the timeline.
    assert where["width"] > over["width"] / 2, (where, over)

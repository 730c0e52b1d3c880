"""The chart habits of a run's metrics page and the runbook pages (chart.ts, smoothing.ts,
csv.ts, pages/runbook.ts): what TensorBoard and W&B users reach for first.

Proves: the smoothing control redraws the charts (another picture on the canvas), goes into
the URL and is remembered by the browser, and a URL's own value wins; the log y toggle redraws
on a log axis, says how many points ≤ 0 it left out, and goes into the URL; a chart's CSV,
caught through the browser's download, holds exactly the points written through the API
(raw, not smoothed, with ISO-8601 times; NaN and ±Inf spelled out); an analyzer report's
runbook link opens the runbook's page (signed out too), and an unknown runbook shows
``not_found``.
"""

import csv
import io
import json
import math
from datetime import datetime
from functools import partial
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from console.helpers import (
    ALPHA,
    UNSTABLE,
    Pages,
    Platform,
    loss_curve,
    series,
    wait_for,
    wait_for_analysis,
)

pytestmark = pytest.mark.e2e

RUN = "habits"
STEPS = range(1, 151)
# A metric that crosses zero (a cosine similarity, say) and one that overflows and goes NaN.
SIGNED = [math.cos(s / 20) for s in STEPS]
WILD = [0.5 + s / 100 for s in STEPS]
WILD[9], WILD[19], WILD[29] = math.nan, math.inf, -math.inf


@pytest.fixture(scope="module")
def habits(platform: Platform) -> Platform:
    """A run with a loss, a metric crossing zero and one with NaN and ±Inf, all stored."""
    platform.create_run(RUN, "chart habits")
    platform.write(
        RUN,
        series("loss", STEPS, loss_curve(STEPS)),
        series("cosine", STEPS, SIGNED),
        series("wild", STEPS, WILD),
    )
    for metric in ("loss", "cosine", "wild"):
        wait_for(partial(stored_all, platform, metric), f"{metric} points")
    return platform


def stored_all(platform: Platform, metric: str) -> bool:
    return platform.point_count(RUN, metric) == len(STEPS)


def chart(page: Page, metric: str) -> Any:
    return page.locator(f'[data-testid=chart][data-metric={metric}][data-ready="true"]')


def picture(page: Page, metric: str) -> str:
    return str(
        page.evaluate(
            "(m) => document.querySelector(`[data-testid=chart][data-metric=${m}] canvas`)"
            ".toDataURL()",
            metric,
        )
    )


def test_smoothing_redraws_goes_into_the_url_and_is_remembered(
    habits: Platform, pages: Pages
) -> None:
    page = pages.open(habits.viewer, f"#/runs/{RUN}/metrics")
    loss = chart(page, "loss")
    expect(loss).to_have_attribute("data-smoothing", "0")
    raw = picture(page, "loss")

    page.get_by_test_id("smoothing").fill("0.9")
    expect(loss).to_have_attribute("data-smoothing", "0.9")
    expect(page.get_by_test_id("smoothing-value")).to_have_text("0.90")
    assert "smooth=0.9" in page.url
    page.wait_for_function(
        "([m, before]) => document.querySelector(`[data-testid=chart][data-metric=${m}] canvas`)"
        ".toDataURL() !== before",
        arg=["loss", raw],
    )
    # The points drawn are still the raw ones (the smoothed line is drawn over them).
    assert loss.get_attribute("data-points") == str(len(STEPS))

    # This browser remembers it on a page whose URL says nothing...
    again = page.context.new_page()
    again.goto(habits.console_url + f"#/runs/{RUN}/metrics")
    expect(chart(again, "loss")).to_have_attribute("data-smoothing", "0.9")
    # ...and a shared URL's own value wins, in a browser that never chose one.
    shared = pages.open(habits.viewer, f"#/runs/{RUN}/metrics?smooth=0.3")
    expect(chart(shared, "loss")).to_have_attribute("data-smoothing", "0.3")
    expect(shared.get_by_test_id("smoothing")).to_have_value("0.3")


def test_the_log_scale_leaves_out_and_counts_values_it_cannot_place(
    habits: Platform, pages: Pages
) -> None:
    page = pages.open(habits.viewer, f"#/runs/{RUN}/metrics")
    cosine = chart(page, "cosine")
    expect(cosine).to_have_attribute("data-y-scale", "linear")
    expect(cosine.get_by_test_id("log-note")).to_be_hidden()
    linear = picture(page, "cosine")

    page.get_by_test_id("log-scale-toggle").check()
    expect(cosine).to_have_attribute("data-y-scale", "log")
    assert "y=log" in page.url
    not_positive = sum(1 for v in SIGNED if v <= 0)
    expect(cosine).to_have_attribute("data-log-dropped", str(not_positive))
    expect(cosine.get_by_test_id("log-note")).to_have_text(f"{not_positive} ≤ 0 not drawn")
    assert picture(page, "cosine") != linear
    # The loss is positive throughout: nothing left out, no note.
    expect(chart(page, "loss")).to_have_attribute("data-log-dropped", "0")
    expect(chart(page, "loss").get_by_test_id("log-note")).to_be_hidden()

    page.get_by_test_id("log-scale-toggle").uncheck()
    expect(cosine).to_have_attribute("data-y-scale", "linear")
    assert "y=log" not in page.url


def _csv_value(text: str) -> float:
    return {"NaN": math.nan, "Inf": math.inf, "-Inf": -math.inf}.get(text) or float(text)


@pytest.mark.parametrize("metric", ["loss", "wild"])
def test_a_charts_csv_holds_the_points_written(habits: Platform, pages: Pages, metric: str) -> None:
    page = pages.open(habits.viewer, f"#/runs/{RUN}/metrics?smooth=0.9")
    drawn = chart(page, metric)
    expect(drawn).to_have_attribute("data-points", str(len(STEPS)))
    with page.expect_download() as caught:
        drawn.get_by_test_id("chart-csv").click()
    download = caught.value
    assert download.suggested_filename == f"{RUN}-{metric}.csv"
    path = download.path()
    text = path.read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == ["series", "step", "time", "value", "min", "max", "points"]

    written = loss_curve(STEPS) if metric == "loss" else WILD
    assert [int(row["step"]) for row in rows] == list(STEPS)
    for row, want in zip(rows, written, strict=True):
        got = _csv_value(row["value"])  # raw, not smoothed
        assert (math.isnan(got) and math.isnan(want)) or got == want, (row, want)
        assert row["series"] == metric
        assert row["points"] == "1"
        assert datetime.fromisoformat(row["time"].replace("Z", "+00:00")).tzinfo is not None
    if metric == "wild":
        assert [rows[i]["value"] for i in (9, 19, 29)] == ["NaN", "Inf", "-Inf"]

    # The API's own answer for the same read: the same steps and values.
    answer = json.loads(
        habits.api.get(
            f"/v1/machineLearningRuns/{RUN}/metrics/{metric}",
            params={"buckets": 1000, "withTimes": "true"},
        )
        .text.replace("-Infinity", '"-Inf"')
        .replace("Infinity", '"Inf"')
    )
    buckets = answer["series"][0]["buckets"]
    assert [str(b["lastStep"]) for b in buckets] == [row["step"] for row in rows]


def test_a_reports_runbook_link_opens_the_runbook(
    platform: Platform, pages: Pages, unstable_event: dict[str, Any]
) -> None:
    event_id = unstable_event["eventId"]
    wait_for_analysis(platform, UNSTABLE, event_id)
    page = pages.open(platform.viewer, f"#/runs/{UNSTABLE}/events?event={event_id}")
    report = page.locator(
        "[data-testid=analyzer-report][data-analyzer=numerical-instability]"
        "[data-detection=DETECTED]"
    )
    link = report.get_by_test_id("runbook-link").first
    expect(link).to_have_attribute("href", "#/runbooks/numerical-instability")
    with page.context.expect_page() as opened:
        link.click()
    runbook = opened.value
    article = runbook.locator("[data-testid=runbook][data-runbook=numerical-instability]")
    expect(article.locator("h1")).to_have_text(
        "Runbook: numerical instability (NaN / Inf, loss spike)"
    )
    expect(article.locator("table").first).to_be_visible()
    expect(runbook).to_have_title("numerical instability (NaN / Inf, loss spike) · mldiag")
    # A link to another runbook stays in the console.
    other = article.locator('a[href^="#/runbooks/"]').first
    if other.count():
        other.click()
        expect(runbook.locator("[data-testid=runbook] h1")).to_contain_text("Runbook")


def test_a_runbook_opens_signed_out_and_an_unknown_one_says_not_found(
    platform: Platform, pages: Pages
) -> None:
    page = pages.open(None, "#/runbooks/hang")
    expect(page.locator("[data-testid=runbook] h1")).to_contain_text("hang", ignore_case=True)
    missing = pages.open(None, "#/runbooks/no-such-runbook")
    expect(missing.get_by_test_id("error")).to_have_attribute("data-code", "not_found")


def test_the_compare_page_shares_the_controls_and_keeps_its_runs_in_the_url(
    habits: Platform, pages: Pages
) -> None:
    page = pages.open(habits.viewer, f"#/compare?runs={RUN},{ALPHA}&y=log")
    loss = chart(page, "loss")
    expect(loss).to_have_attribute("data-y-scale", "log")
    page.get_by_test_id("smoothing").fill("0.5")
    expect(loss).to_have_attribute("data-smoothing", "0.5")
    assert f"runs={RUN},{ALPHA}" in page.url
    assert "smooth=0.5" in page.url
    assert "y=log" in page.url

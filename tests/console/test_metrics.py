"""A run's metrics page (pages/metrics.ts): its charts drawn, and redrawn live.

Proves: the page draws the run's loss chart from the stored points (coloured pixels on the
canvas), and points written while it is open redraw it without a reload.
"""

import pytest
from playwright.sync_api import expect

from console.helpers import (
    ALPHA,
    CANVAS_COLOURS,
    LINE_BLUE,
    SEED_STEPS,
    Pages,
    Platform,
    loss_curve,
    mark_page,
    near,
    not_reloaded,
    series,
)

pytestmark = pytest.mark.e2e


def test_a_run_page_draws_its_loss_chart_and_redraws_it_with_new_points(
    platform: Platform, pages: Pages
) -> None:
    page = pages.open(platform.viewer, f"#/runs/{ALPHA}/metrics")
    chart = page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')
    expect(chart).to_be_visible()
    drawn = int(chart.get_attribute("data-points") or 0)
    assert 0 < drawn <= SEED_STEPS
    assert chart.get_attribute("data-nan-buckets") == "0"
    expect(chart.locator(".chart-readout")).to_contain_text(f"step {SEED_STEPS}")
    expect(page.locator("[data-testid=metric-section][data-section=quality]")).to_be_visible()

    canvas = page.evaluate(CANVAS_COLOURS, "loss")
    colours: dict[str, int] = canvas["colours"]
    assert canvas["width"] > 200
    assert len(colours) >= 4, colours  # line, band, grid, axis labels at least
    line = sum(count for key, count in colours.items() if near(key, LINE_BLUE))
    assert line > canvas["width"] // 2, f"the loss line is hardly drawn: {line} px"

    mark_page(page)
    more = range(SEED_STEPS + 1, SEED_STEPS + 101)
    platform.write(
        ALPHA,
        series("loss", more, loss_curve(more)),
        series("loss", more, loss_curve(more, 0.08), host="host-1"),
    )
    readout = chart.locator(".chart-readout")
    expect(readout).to_contain_text(f"step {SEED_STEPS + 100}", timeout=20_000)
    expect(chart).not_to_have_attribute("data-points", str(drawn))
    assert int(chart.get_attribute("data-points") or 0) > drawn
    assert not_reloaded(page)

"""The runs list and the compare page (pages/runs.ts, pages/compare.ts), as a viewer sees them.

Proves: signing in with a viewer token lists the runs; the state filter narrows the table; a
run created meanwhile appears without a reload (the live stream); two runs picked in the table
compare on one chart, with their configs' differences.
"""

import re

import pytest
from playwright.sync_api import expect

from console.helpers import ALPHA, BETA, GAMMA, Pages, Platform, mark_page, not_reloaded

pytestmark = pytest.mark.e2e


def test_runs_list_signs_in_filters_by_state_and_shows_a_new_run_live(
    platform: Platform, pages: Pages
) -> None:
    page = pages.open()
    page.fill("#token-input", platform.viewer)
    page.click("#sign-in")
    expect(page.get_by_test_id("caller-role")).to_have_text("viewer")
    rows = page.locator("[data-testid=runs-table] tbody tr[data-run-id]")
    for run_id in (ALPHA, BETA, GAMMA):
        expect(page.locator(f'tr[data-run-id="{run_id}"]')).to_be_visible()
    assert page.evaluate("localStorage.getItem('mldiag.token')") == platform.viewer

    page.get_by_test_id("state-filter").select_option("STATE_COMPLETED")
    expect(page.get_by_test_id("filter-text")).to_have_text("state = STATE_COMPLETED")
    expect(rows).to_have_count(1)
    expect(page.locator(f'tr[data-run-id="{BETA}"]')).to_be_visible()
    assert "state=STATE_COMPLETED" in page.url

    page.get_by_test_id("state-filter").select_option("")
    expect(page.locator(f'tr[data-run-id="{GAMMA}"]')).to_be_visible()
    expect(page.get_by_test_id("live")).to_have_text("● live")
    mark_page(page)
    platform.create_run("delta", "delta arrives live", runSet="bert")
    expect(page.locator('tr[data-run-id="delta"]')).to_be_visible()
    expect(rows.first).to_have_attribute("data-run-id", "delta")  # newest first
    assert not_reloaded(page)


def test_two_runs_picked_in_the_table_compare_on_one_chart(
    platform: Platform, pages: Pages
) -> None:
    page = pages.open(platform.viewer, "#/runs")
    for run_id in (ALPHA, BETA):
        page.locator(f'tr[data-run-id="{run_id}"] [data-testid=run-select]').check()
    page.get_by_test_id("compare-button").click()
    expect(page).to_have_url(re.compile(r"#/compare\?runs="))
    expect(page.locator("[data-testid=compare-runs] li")).to_have_count(2)
    chart = page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')
    expect(chart).to_be_visible()
    expect(chart.locator(".legend-item")).to_have_count(2)  # one line per run
    diff = page.get_by_test_id("configs-diff")
    expect(diff.locator('tr[data-key="lr"]')).to_be_visible()
    expect(diff.locator('tr[data-key="optimizer"]')).to_contain_text("adam")
    expect(diff.locator('tr[data-key="batch"]')).to_have_count(0)  # unchanged: hidden

"""A run's profiles page (pages/profiles.ts): on-demand captures of the running job.

Proves: an editor's capture button captures the running JAX workload into a new session
listed on the page; a viewer sees the session but has no capture button.
"""

import pytest
from playwright.sync_api import expect

from console.helpers import PROFILED, Pages, Platform, wait_for

pytestmark = pytest.mark.e2e


def test_the_capture_button_captures_the_running_job_into_a_session(
    platform: Platform, pages: Pages
) -> None:
    wait_for(lambda: platform.targets(PROFILED), "profiler target of the JAX job", timeout=90)
    editor = pages.open(platform.editor, f"#/runs/{PROFILED}/profiles")
    editor.get_by_test_id("capture-button").click()
    form = editor.get_by_test_id("capture-form")
    expect(form).to_be_visible()
    form.get_by_test_id("capture-duration").fill("500")
    form.get_by_test_id("capture-submit").click()
    status = editor.locator('[data-testid=capture-status][data-state="SUCCEEDED"]')
    expect(status).to_be_visible(timeout=90_000)
    session_id = (status.text_content() or "").rsplit(" ", 1)[-1]
    row = editor.locator(f'tr[data-session-id="{session_id}"]')
    expect(row).to_have_attribute("data-phase", "SUCCEEDED")
    row.click()
    detail = editor.get_by_test_id("session-detail")
    expect(detail.locator('[data-testid=session-hosts] tr[data-host="host-0"]')).to_contain_text(
        "SUCCEEDED"
    )

    viewer = pages.open(platform.viewer, f"#/runs/{PROFILED}/profiles")
    expect(viewer.locator(f'tr[data-session-id="{session_id}"]')).to_be_visible()
    expect(viewer.get_by_test_id("capture-button")).to_have_count(0)
    expect(viewer.get_by_test_id("capture-form")).to_have_count(0)

"""Share links: made and revoked in the dialog (share.ts), opened signed out (pages/shared.ts).

Proves: a share link made in the console's dialog opens the run signed out, and reaches
nothing else (in the page, or with its token against the API); it stops when revoked in the
dialog and when it expires; a link to one event shows that event with its reports and refuses
the run's metrics.
"""

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from console.helpers import ALPHA, BETA, UNSTABLE, Pages, Platform, wait_for_analysis

pytestmark = pytest.mark.e2e


def test_a_share_link_from_the_dialog_opens_one_run_signed_out_until_revoked(
    platform: Platform, pages: Pages
) -> None:
    # An editor makes the link in the run header's share dialog.
    editor = pages.open(platform.editor, f"#/runs/{ALPHA}")
    expect(editor.get_by_test_id("run-name")).to_have_text("alpha baseline")
    editor.get_by_test_id("run-header").get_by_test_id("share-button").click()
    dialog = editor.get_by_test_id("share-dialog")
    dialog.get_by_test_id("share-ttl").select_option("3600")
    dialog.get_by_test_id("share-create").click()
    url = dialog.get_by_test_id("share-url").input_value()
    assert url.startswith(platform.console_url + "#/share/mldiag_share_"), url
    token = url.rsplit("/", 1)[-1]
    [link] = platform.get("/v1/shareLinks", resource=f"machineLearningRuns/{ALPHA}")["shareLinks"]
    row = dialog.locator(f'[data-testid=share-link][data-link-id="{link["linkId"]}"]')
    expect(row).to_have_attribute("data-state", "ACTIVE")

    # Signed out, in a browser that never saw a token: the run, read-only.
    shared = pages.open(url=url)
    expect(shared.get_by_test_id("shared-banner")).to_contain_text("alpha baseline")
    expect(shared.get_by_test_id("shared-banner")).to_have_attribute("data-kind", "RUN")
    expect(shared.get_by_test_id("caller-role")).to_have_text("shared")
    expect(shared.get_by_test_id("run-name")).to_have_text("alpha baseline")
    expect(shared.get_by_test_id("share-button")).to_have_count(0)
    shared.get_by_test_id("tab-metrics").click()
    expect(
        shared.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')
    ).to_be_visible()
    assert shared.evaluate("localStorage.getItem('mldiag.token')") is None

    # (a) Nothing else: another run in the page needs a sign-in; through the API, 403.
    shared.goto(f"{platform.console_url}#/runs/{BETA}")
    expect(shared.locator("#token-input")).to_be_visible()
    expect(shared.get_by_test_id("run-header")).to_have_count(0)
    with platform.as_bearer(token) as bearer:
        assert bearer.get(f"/v1/machineLearningRuns/{ALPHA}/metrics").status_code == 200
        for path in (
            f"/v1/machineLearningRuns/{BETA}",
            f"/v1/machineLearningRuns/{BETA}/metrics/loss",
            f"/v1/projects/other/locations/local/machineLearningRuns/{ALPHA}",
        ):
            refused = bearer.get(path)
            assert refused.status_code == 403, (path, refused.text)
            assert refused.json()["error"]["code"] == "outside_share_scope", refused.text
        listing = bearer.get("/v1/machineLearningRuns")
        assert listing.status_code == 403, listing.text
        assert listing.json()["error"]["code"] == "permission_denied"
        writing = bearer.post("/v1/machineLearningRuns", json={"displayName": "sneaky"})
        assert writing.status_code == 403, writing.text

    # (b) Revoked in the dialog: the link stops at the next load.
    row.get_by_test_id("share-revoke").click()
    expect(row).to_have_attribute("data-state", "REVOKED")
    shared.goto(url)
    expect(shared.get_by_test_id("error")).to_have_attribute("data-code", "share_link_revoked")
    expect(shared.get_by_test_id("run-header")).to_have_count(0)
    with platform.as_bearer(token) as bearer:
        revoked = bearer.get(f"/v1/machineLearningRuns/{ALPHA}")
        assert revoked.status_code == 401, revoked.text
        assert revoked.json()["error"]["code"] == "share_link_revoked"


def test_a_share_link_stops_once_it_expires(platform: Platform, pages: Pages) -> None:
    # The shortest link there is (1 s), opened once its time is up.
    short = platform.share(f"machineLearningRuns/{ALPHA}", ttl_seconds=1)
    expire = datetime.fromisoformat(short["shareLink"]["expireTime"].replace("Z", "+00:00"))
    time.sleep(max(0.0, (expire - datetime.now(UTC)).total_seconds()) + 0.3)
    late = pages.open(url=short["url"])
    expect(late.get_by_test_id("error")).to_have_attribute("data-code", "share_link_expired")
    expect(late.get_by_test_id("shared-banner")).to_have_count(0)


def test_an_event_share_link_shows_the_event_with_its_reports_and_not_the_run(
    platform: Platform, pages: Pages, unstable_event: dict[str, Any]
) -> None:
    event_id = unstable_event["eventId"]
    wait_for_analysis(platform, UNSTABLE, event_id)
    event_link = platform.share(f"machineLearningRuns/{UNSTABLE}/monitoredEvents/{event_id}")
    event_page = pages.open(url=event_link["url"])
    expect(event_page.get_by_test_id("shared-banner")).to_have_attribute("data-kind", "EVENT")
    detail = event_page.get_by_test_id("event-detail")
    expect(detail).to_have_attribute("data-event-id", event_id)
    expect(detail.get_by_test_id("analyzer-report").first).to_be_visible()
    expect(event_page.get_by_test_id("tabs")).to_have_count(0)
    with platform.as_bearer(event_link["token"]) as bearer:
        event_path = f"/v1/machineLearningRuns/{UNSTABLE}/monitoredEvents/{event_id}"
        assert bearer.get(event_path).status_code == 200
        metrics = bearer.get(f"/v1/machineLearningRuns/{UNSTABLE}/metrics/loss")
        assert metrics.status_code == 403, metrics.text
        assert metrics.json()["error"]["code"] == "outside_share_scope"

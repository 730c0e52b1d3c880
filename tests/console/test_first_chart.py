"""How a cold visit reaches its first chart (index.html's early reads, prefetch.ts; the run
header's details after the tab, pages/run.ts; the registry's caching headers).

Proves: on a cold visit of a run's metrics tab, the caller, the metric list and the run are
requested before the app's bundle has even started (by the script inlined in index.html), and
each once (the app takes the early answers); the header's heartbeats wait until a chart has
drawn (or the tab's grace time ran out) and still show; the bundle is asked for by its content
version and may be kept for good, the page itself is revalidated.
"""

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from console.helpers import ALPHA, Pages, Platform

pytestmark = pytest.mark.e2e

DETAILS_WAIT_MS = 1500  # pages/run.ts: the header's details wait at most this long

TIMELINE = """
() => ({
  marks: Object.fromEntries(performance.getEntriesByType("mark").map((m) => [m.name, m.startTime])),
  requests: performance.getEntriesByType("resource").map((e) => ({
    path: new URL(e.name).pathname, query: new URL(e.name).search, start: e.startTime,
  })),
})
"""


def test_a_cold_visit_reads_the_first_charts_needs_early_and_once(
    platform: Platform, pages: Pages
) -> None:
    page = pages.open(platform.viewer, f"#/runs/{ALPHA}/metrics")
    expect(page.locator('[data-testid=chart][data-metric=loss][data-ready="true"]')).to_be_visible()
    expect(page.get_by_test_id("hosts")).to_be_visible()  # the header's details came after
    timeline: dict[str, Any] = page.evaluate(TIMELINE)
    marks: dict[str, float] = timeline["marks"]
    requests: list[dict[str, Any]] = timeline["requests"]

    def starts(path: str) -> list[float]:
        return [r["start"] for r in requests if r["path"] == path]

    run = f"/v1/machineLearningRuns/{ALPHA}"
    for path in ("/v1/caller", f"{run}/metrics", run):
        started = starts(path)
        assert started, f"{path} was not read"
        assert started[0] < marks["mldiag:app-started"], f"{path} was not read early"
    assert len(starts("/v1/caller")) == 1
    assert len(starts(f"{run}/metrics")) == 1  # the app took the early answer
    # the heartbeats waited for the first chart (or for the tab's grace time)
    heartbeats = starts(f"{run}/heartbeats")
    assert heartbeats
    settled = min(marks["mldiag:first-chart"], marks["mldiag:app-started"] + DETAILS_WAIT_MS)
    assert heartbeats[0] >= settled - 1
    # a chart by step reads without times
    reads = [r for r in requests if r["path"] == f"{run}/metrics/loss"]
    assert reads and "withTimes" not in reads[0]["query"]


def test_the_bundle_is_kept_for_good_and_the_page_revalidated(platform: Platform) -> None:
    page = httpx.get(platform.console_url, timeout=10)
    assert page.headers["cache-control"] == "no-cache"
    # preloaded by a link, run by the inline script once the first reads are out
    script = next(
        part.split('"')[0] for part in page.text.split('href="')[1:] if part.startswith("app.js?v=")
    )
    base = platform.console_url.split("#")[0]
    answer = httpx.get(base + script, timeout=10, headers={"Accept-Encoding": "gzip"})
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert answer.headers["content-encoding"] == "gzip"
    assert "javascript" in answer.headers["content-type"]

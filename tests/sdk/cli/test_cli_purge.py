"""``mldiag runs purge``: a deleted run removed for good; a live one refused (real registry)."""

import json
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.connected


def test_purge_a_deleted_run(platform_apps: Any, mldiag: Callable[..., Any]) -> None:
    api = ("--api-url", platform_apps.api_url)
    for run_id in ("cli-live", "cli-gone"):
        created = mldiag("runs", "create", *api, "--display-name", run_id, "--run-id", run_id)
        assert created.code == 0, created.err

    live = mldiag("runs", "purge", "cli-live", *api)
    assert live.code == 1
    assert live.err.startswith("error: run_not_deleted: ")

    assert mldiag("runs", "delete", "cli-gone", *api).code == 0
    purged = mldiag("runs", "purge", "cli-gone", *api)
    assert purged.code == 0, purged.err
    assert purged.out.startswith("purged run cli-gone: 0 metric points, 0 events")
    assert "2 operations" in purged.out  # its create and its delete

    again = mldiag("runs", "purge", "cli-gone", *api, "--format", "json")
    assert again.code == 1
    assert again.err.startswith("error: run_not_found: ")
    recreated = mldiag(
        "--format", "json", "runs", "create", *api, "--display-name", "x", "--run-id", "cli-gone"
    )
    assert json.loads(recreated.out)["response"]["runId"] == "cli-gone"  # the id is free

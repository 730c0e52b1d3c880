"""The gcloud shape against the real run-registry (real NATS and PostgreSQL): full names in
another project, aliases, server-side ``--sort-by`` with ``--limit``, projections and
``--uri``."""

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.connected


def test_full_names_aliases_and_listing_flags(
    platform_apps: Any, mldiag: Callable[..., Any]
) -> None:
    api = ("--api-url", platform_apps.api_url)
    for run_id, name in (("g-b", "beta"), ("g-a", "alpha"), ("g-c", "gamma")):
        made = mldiag(
            "machine-learning-runs",
            "create",
            *api,
            "--project",
            "p1",
            "--location",
            "l1",
            "--run-id",
            run_id,
            "--display-name",
            name,
        )
        assert made.code == 0, made.err

    full = "projects/p1/locations/l1/machineLearningRuns/g-a"
    described = mldiag("runs", "describe", full, *api, "--format", "value(name,displayName)")
    assert described.code == 0, described.err
    assert described.out == f"{full}\talpha\n"
    # The same id without the full name's project is another (missing) run.
    assert mldiag("runs", "describe", "g-a", *api).code == 1

    listed = mldiag(
        "runs",
        "list",
        *api,
        "--project",
        "p1",
        "--location",
        "l1",
        "--sort-by",
        "displayName",
        "--limit",
        "2",
        "--page-size",
        "1",
        "--uri",
    )
    assert listed.code == 0, listed.err
    assert listed.out.splitlines() == [
        "projects/p1/locations/l1/machineLearningRuns/g-a",
        "projects/p1/locations/l1/machineLearningRuns/g-b",
    ]

    shown = mldiag(
        "runs", "list", *api, "--project", "p1", "--location", "l1", "--format", "csv(runId)"
    )
    assert sorted(shown.out.splitlines()[1:]) == ["g-a", "g-b", "g-c"]
    assert shown.out.splitlines()[0] == "runId"

    conflict = mldiag("configs", "diff", full, "g-b", *api, "--project", "p2")
    assert conflict.code == 2
    assert "--project p2" in conflict.err and full in conflict.err

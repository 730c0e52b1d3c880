"""The route table against the services themselves: every operation of every service's
OpenAPI document (apps built without I/O) goes to that service, and look-alikes do not."""

import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from starlette.routing import Match

from mldiag_platform.edge.routes import ROUTES, SERVICES, RouteTable, routes_markdown

ROOT = Path(__file__).resolve().parents[3]
MODULES = {
    "run-registry": "mldiag_run_registry",
    "ingestion": "mldiag_ingestion",
    "xprof-provisioner": "mldiag_xprof_provisioner",
    "training": "mldiag_training",
    "notifier": "mldiag_notifier",
}
"""Every service with an HTTP API for users, and its package."""
TABLE = RouteTable()


def _built(module: str) -> bool:
    try:
        return importlib.util.find_spec(f"{module}.app") is not None
    except ImportError:
        return False


@pytest.fixture(scope="module")
def apps() -> dict[str, FastAPI]:
    built = {}
    for service, module in MODULES.items():
        if _built(module):
            built[service] = importlib.import_module(f"{module}.app").create_app()
    return built


def _serves(app: FastAPI, method: str, path: str) -> bool:
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
    return any(route.matches(scope)[0] is Match.FULL for route in app.routes)


def _operations(apps: dict[str, FastAPI]) -> Iterator[tuple[str, str, str]]:
    for service, app in apps.items():
        for template, operations in app.openapi()["paths"].items():
            path = re.sub(r"\{[^}]+\}", "some-id", template)
            for method in operations:
                yield service, method.upper(), path


def test_every_service_of_the_table_has_an_api() -> None:
    assert set(SERVICES) == set(MODULES)


def test_every_operation_goes_to_the_service_that_serves_it(apps: dict[str, FastAPI]) -> None:
    routed = 0
    for owner, method, path in _operations(apps):
        assert _serves(apps[owner], method, path), f"{owner} does not serve {method} {path}"
        assert TABLE.service_for(path) == owner, f"{method} {path} goes elsewhere"
        # With a real region as the location, as the Vertex SDK sends it.
        regional = path.replace("locations/some-id", "locations/us-central1")
        assert TABLE.service_for(regional) == owner
        routed += 1
    assert routed > 60


@pytest.mark.parametrize(
    ("path", "service"),
    [
        ("/v1/machineLearningRuns/r1/metrics:write", "ingestion"),
        ("/v1/projects/p/locations/l/machineLearningRuns/r1/logs:write", "ingestion"),
        ("/v1/projects/p/locations/us-central1/machineLearningRuns/r1:heartbeat", "ingestion"),
        ("/v1/machineLearningRuns/r1:reportSignal", "ingestion"),
        ("/v1/metrics", "ingestion"),
        ("/v1/logs", "ingestion"),
        ("/v1/projects/p/locations/us-central1/customJobs", "training"),
        ("/v1/projects/p/locations/us-central1/customJobs/123:cancel", "training"),
        ("/v1/projects/p/locations/l/customJobs/123/logs", "training"),
        ("/v1/customJobs/123", "training"),
        ("/v1/projects/p/locations/l/hyperparameterTuningJobs/9", "training"),
        ("/v1/projects/p/locations/l/trainingPipelines", "training"),
        ("/v1/projects/p/locations/l/models:upload", "training"),
        ("/v1/projects/p/locations/l/models/7@1", "training"),
        ("/upload/v1/projects/p/locations/l/customJobs/1/packages", "training"),
        ("/v1/xprofInstances", "xprof-provisioner"),
        ("/v1/projects/p/locations/l/notificationChannels", "notifier"),
        ("/v1/notificationChannels/ops-hook:test", "notifier"),
        ("/v1/projects/p/locations/us-central1/alertRules/r1", "notifier"),
        ("/v1/notificationDeliveries", "notifier"),
        ("/xprof/open", "xprof-provisioner"),
        # Look-alikes that belong to the registry.
        ("/v1/machineLearningRuns/r1/metrics", "run-registry"),
        ("/v1/machineLearningRuns/r1/metrics/train/metrics:write", "run-registry"),
        ("/v1/machineLearningRuns/r1/metrics:latest", "run-registry"),
        ("/v1/machineLearningRuns/r1/logs", "run-registry"),
        ("/v1/projects/p/locations/l/machineLearningRuns/r1/logs", "run-registry"),
        ("/v1/metricsfoo", "run-registry"),
        ("/v1/customJobsAndMore", "run-registry"),
        ("/v1/modelsX", "run-registry"),
        ("/v1/alertRulesX", "run-registry"),
        ("/v1/projects/p/locations/l/operations/o1", "run-registry"),
        ("/console/", "run-registry"),
        ("/healthz", "run-registry"),
        ("/", "run-registry"),
    ],
)
def test_routes(path: str, service: str) -> None:
    assert TABLE.service_for(path) == service


def test_patterns_are_tried_longest_first_as_ingress_nginx_does() -> None:
    lengths = [len(route.pattern) for _, route in TABLE.ordered]
    assert lengths == sorted(lengths, reverse=True)
    assert TABLE.ordered[-1][1].pattern == "/"
    # Case is ignored, as nginx's ~* does.
    assert TABLE.service_for("/V1/METRICS") == "ingestion"


def test_the_deployment_guide_prints_the_table() -> None:
    guide = (ROOT / "docs" / "deployment.md").read_text()
    assert routes_markdown(ROUTES) in guide

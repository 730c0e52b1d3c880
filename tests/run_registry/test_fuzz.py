"""schemathesis over the registry's whole OpenAPI document: no generated request, valid or
not, gets a 5xx.

The registry is served on a port (real NATS and PostgreSQL from the fixtures). Every
operation gets positive and negative cases (schemathesis' two generation modes), half of
them addressed to resources that exist (a run, its session, an operation, a token, a share
link), so bodies and queries reach the services and the database instead of stopping at a
404. Calls carry an admin token, so writes go through.
Failures are collected across operations, so one run names every 500 at once.
"""

from functools import partial
from typing import Any

import pytest
import requests
import schemathesis

from conftest import ApiTokens
from fuzzing import Fuzzer, aimed
from mldiag_run_registry.app import create_app
from mldiag_schemas.auth import Role
from run_registry.helpers import RegistrySettings
from support import served_in_thread

RUN_ID = "fuzz-target"
"""A run created before fuzzing, so that run-scoped operations get past the lookup."""


def _seed(session: requests.Session, base_url: str, headers: dict[str, str]) -> dict[str, str]:
    """A run with a profiler session, an operation, a token and a share link: the ids
    fuzzed cases are addressed to half of the time."""

    def post(path: str, body: dict[str, object]) -> dict[str, Any]:
        response = session.post(f"{base_url}/v1/{path}", json=body, headers=headers)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    created = post("machineLearningRuns", {"runId": RUN_ID, "displayName": "fuzzed"})
    report = {"sessionId": "s1", "host": "h1", "phase": "ACTIVE"}
    post(f"machineLearningRuns/{RUN_ID}/profilerSessions:report", report)
    token = post("apiTokens", {"role": "viewer"})
    link = post("shareLinks", {"resource": f"machineLearningRuns/{RUN_ID}"})
    return {
        "project": "default",
        "location": "local",
        "run_id": RUN_ID,
        "session_id": "s1",
        "operation_id": created["name"].rsplit("/", 1)[-1],
        "token_id": token["token"]["tokenId"],
        "link_id": link["shareLink"]["linkId"],
    }


@pytest.mark.connected
def test_no_operation_answers_a_server_error(
    registry_settings_with: RegistrySettings, api_tokens: ApiTokens
) -> None:
    app = create_app(registry_settings_with())
    schema = schemathesis.openapi.from_dict(app.openapi())
    headers = api_tokens.headers(Role.ADMIN)
    with served_in_thread(app) as base_url, requests.Session() as session:
        fuzzer = Fuzzer(session, base_url, headers)
        fuzzer.fuzz_all(schema, partial(aimed, known=_seed(session, base_url, headers)))
    print(fuzzer.summary())  # noqa: T201  # the figures the issue asks for (seen with -s)
    assert len(fuzzer.operations) >= 78  # every route, long and short forms
    assert fuzzer.statuses[200] > 0  # some cases were valid all the way through
    assert fuzzer.failures == []

"""schemathesis over the training service's whole OpenAPI document: no generated request,
valid or not, gets a server error (a 501 UNIMPLEMENTED naming a Vertex feature mldiag does
not provide is an answer, not a failure).

The service is served on a port (real NATS and PostgreSQL from the fixtures, its scheduler
running). Every operation gets positive and negative cases, half of them addressed to a job
that exists, so bodies and queries reach the service and the database instead of stopping
at a 404. Calls carry an admin token, so writes go through.
"""

from functools import partial

import pytest
import requests
import schemathesis

from conftest import ApiTokens
from fuzzing import Fuzzer, aimed
from mldiag_schemas.auth import Role
from mldiag_training.app import create_app
from mldiag_training.settings import TrainingSettings
from support import served_in_thread
from training.jobs.bodies import sdk_job

pytestmark = pytest.mark.connected


class TrainingFuzzer(Fuzzer):
    """A fuzzer for which UNIMPLEMENTED is a refusal like any 4xx."""

    def record(self, response: requests.Response, what: str) -> None:
        """Count ``response``; a 501 must be the Vertex UNIMPLEMENTED answer."""
        if response.status_code == 501:
            self.statuses[501] += 1
            if response.json()["error"]["status"] != "UNIMPLEMENTED":
                self.failures.append(f"{what} -> 501 {response.text:.300}")
            return
        super().record(response, what)


def test_no_operation_answers_a_server_error(
    training_settings: TrainingSettings, api_tokens: ApiTokens
) -> None:
    app = create_app(training_settings)
    schema = schemathesis.openapi.from_dict(app.openapi())
    headers = api_tokens.headers(Role.ADMIN)
    with served_in_thread(app) as base_url, requests.Session() as session:
        created = session.post(f"{base_url}/v1/customJobs", json=sdk_job(), headers=headers)
        assert created.status_code == 200, created.text
        known = {
            "project": "default",
            "location": "local",
            "job_id": created.json()["name"].rsplit("/", 1)[-1],
        }
        fuzzer = TrainingFuzzer(session, base_url, headers)
        fuzzer.fuzz_all(schema, partial(aimed, known=known))
    print(fuzzer.summary())  # noqa: T201  # the figures (seen with -s)
    assert len(fuzzer.operations) >= 12  # every jobs route, long and short forms
    assert fuzzer.statuses[200] > 0  # some cases were valid all the way through
    assert fuzzer.failures == []

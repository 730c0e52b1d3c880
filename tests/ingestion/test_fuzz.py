"""schemathesis over ingestion's whole OpenAPI document: no generated request, valid or not,
gets a 5xx.

The assembled app (OTLP/HTTP routes included) is served on a port with real NATS, so
accepted writes go all the way to JetStream. Every operation gets positive and negative
cases, some addressed to a valid run (and the default project and location), so bodies
reach the service instead of stopping at the run id check. Calls carry an admin token.
Failures are collected across operations, so one run names every 5xx at once.
"""

from functools import partial
from typing import Any

import pytest
import requests
import schemathesis

from conftest import ApiTokens
from fuzzing import Fuzzer, aimed
from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.auth import Role
from support import served_in_thread

pytestmark = pytest.mark.connected

EXAMPLES = 80
"""Cases per operation: 8 operations stay well under a minute on 2 CPUs."""

KNOWN = {"project": "default", "location": "local", "run_id": "fuzz-run"}


@schemathesis.serializer("application/x-protobuf")
def _protobuf(_context: Any, value: Any) -> dict[str, Any]:
    """OTLP bodies go out as generated: bytes (or text) that are mostly not protobuf."""
    raw = value if isinstance(value, bytes) else str(value).encode()
    return {"data": raw}


def test_no_operation_answers_a_server_error(
    nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    app = create_app(IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0))
    schema = schemathesis.openapi.from_dict(app.openapi())
    with served_in_thread(app) as base_url, requests.Session() as session:
        fuzzer = Fuzzer(session, base_url, api_tokens.headers(Role.ADMIN))
        fuzzer.fuzz_all(schema, partial(aimed, known=KNOWN))
    print(f"\n{fuzzer.summary()}")  # noqa: T201
    run = "/v1/projects/{project}/locations/{location}/machineLearningRuns/{run_id}"
    short = "/v1/machineLearningRuns/{run_id}"
    assert sorted(fuzzer.operations) == sorted(
        [
            *(f"POST {base}{verb}" for base in (run, short) for verb in _VERBS),
            "POST /v1/logs",
            "POST /v1/metrics",
        ]
    )
    # some cases were accepted and stored
    assert fuzzer.statuses[202] > 0 and fuzzer.statuses[204] > 0
    assert fuzzer.failures == []


_VERBS = ("/metrics:write", "/logs:write", ":heartbeat", ":reportSignal")

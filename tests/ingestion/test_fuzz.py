"""schemathesis over ingestion's whole OpenAPI document: no generated request, valid or not,
gets a 5xx.

The assembled app (OTLP/HTTP routes included) is served on a port with real NATS, so
accepted writes go all the way to JetStream. Every operation gets positive and negative
cases, some addressed to a valid run (and the default project and location), so bodies
reach the service instead of stopping at the run id check. Calls carry an admin token.
Failures are collected across operations, so one run names every 5xx at once.
"""

from collections import Counter
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode

from conftest import ApiTokens
from mldiag_ingestion.app import create_app
from mldiag_ingestion.settings import IngestionSettings
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.auth import Role
from support import served_in_thread

pytestmark = pytest.mark.connected

EXAMPLES = 40
"""Cases per strategy: 8 operations stay well under a minute on 2 CPUs."""

KNOWN = {"project": "default", "location": "local", "run_id": "fuzz-run"}


@schemathesis.serializer("application/x-protobuf")
def _protobuf(_context: Any, value: Any) -> dict[str, Any]:
    """OTLP bodies go out as generated: bytes (or text) that are mostly not protobuf."""
    raw = value if isinstance(value, bytes) else str(value).encode()
    return {"data": raw}


def _strategy(operation: schemathesis.APIOperation) -> st.SearchStrategy[Case]:
    """Positive and negative cases, anywhere and on a valid run."""
    names = {parameter.name for parameter in operation.path_parameters}
    fixed = {name: value for name, value in KNOWN.items() if name in names}
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    if fixed:
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed))
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=fixed))
    return st.one_of(strategies)


def test_no_operation_answers_a_server_error(
    nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    app = create_app(IngestionSettings(nats=nats_settings, otlp_grpc_port=0, otlp_http_port=0))
    schema = schemathesis.openapi.from_dict(app.openapi())
    headers = api_tokens.headers(Role.ADMIN)
    fuzz_settings = settings(
        max_examples=EXAMPLES * 2,
        deadline=None,
        database=None,  # each run starts fresh: no examples replayed from a local cache
        phases=[Phase.explicit, Phase.generate],  # no shrinking: the failure is logged whole
        suppress_health_check=list(HealthCheck),
    )
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    fuzzed: list[str] = []
    with served_in_thread(app) as base_url, requests.Session() as session:

        def call(case: Case) -> None:
            kwargs = case.as_transport_kwargs(base_url=base_url, headers=headers)
            response = session.request(**kwargs, timeout=60, allow_redirects=False)
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                failures.append(
                    f"{case.method} {case.formatted_path} body={case.body!r:.300}"
                    f" -> {response.status_code} {response.text:.300}"
                )

        for result in schema.get_all_operations():
            operation = result.ok()
            fuzzed.append(f"{operation.method.upper()} {operation.path}")

            @fuzz_settings
            @given(case=_strategy(operation))
            def fuzz(case: Case) -> None:
                call(case)

            fuzz()
    print(f"\nfuzz.done operations={len(fuzzed)} statuses={dict(sorted(statuses.items()))}")  # noqa: T201
    run = "/v1/projects/{project}/locations/{location}/machineLearningRuns/{run_id}"
    short = "/v1/machineLearningRuns/{run_id}"
    assert sorted(fuzzed) == sorted(
        [
            *(f"POST {base}{verb}" for base in (run, short) for verb in _VERBS),
            "POST /v1/logs",
            "POST /v1/metrics",
        ]
    )
    assert statuses[202] > 0 and statuses[204] > 0  # some cases were accepted and stored
    assert failures == []


_VERBS = ("/metrics:write", ":heartbeat", ":reportSignal")

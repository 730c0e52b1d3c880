"""The committed JSON Schema and AsyncAPI documents match the contracts in code."""

import json
from pathlib import Path

from mldiag_schemas.documents import render

CONTRACTS = Path(__file__).resolve().parents[2] / "schemas" / "contracts"


def test_committed_documents_match_the_code() -> None:
    expected = render()
    for relative, content in expected.items():
        path = CONTRACTS / relative
        assert path.exists(), f"{relative} is missing: run `python -m mldiag_schemas`"
        assert path.read_text() == content, (
            f"{relative} differs from the code: if the change is intended, run "
            "`python -m mldiag_schemas` and commit the result"
        )
    committed = {str(p.relative_to(CONTRACTS)) for p in CONTRACTS.rglob("*.json")}
    # The HTTP API's document comes from the services' apps (mldiag_platform.edge.openapi);
    # tests/platform/edge/test_openapi.py checks it.
    committed.discard("openapi.json")
    assert committed == set(expected), f"stale documents: {committed - set(expected)}"


def test_asyncapi_names_every_message_channel() -> None:
    document = json.loads(render()["asyncapi.json"])
    assert document["asyncapi"] == "3.0.0"
    addresses = {channel["address"] for channel in document["channels"].values()}
    assert "{namespace}.telemetry.metrics.received.{runId}" in addresses
    assert "{namespace}.events.workload.opened.{runId}" in addresses
    for message in document["components"]["messages"].values():
        name = message["payload"]["$ref"].rsplit("/", 1)[-1]
        assert name in document["components"]["schemas"]

"""The one OpenAPI document of the base URL: the committed file is what the services'
apps describe, every route they register is in it, it documents the error body the error
boundary really answers (never FastAPI's 422), and the edge serves the same document."""

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts

from mldiag_platform.edge.app import DOCS_PATH, Edge
from mldiag_platform.edge.openapi import (
    SECURITY_SCHEME,
    SERVICE_APPS,
    default_path,
    merge,
    render,
    service_documents,
)
from mldiag_platform.edge.routes import SERVICES, Route, RouteTable
from mldiag_platform.edge.settings import EdgeSettings
from support import free_port, served_on_port

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "schemas" / "contracts" / "openapi.json"

UNDOCUMENTED = ("/openapi.json", "/docs", "/redoc", "/healthz", "/metrics", "/console", "/xprof/")
"""Routes left out of the document on purpose, by path prefix: the documents themselves,
health and metrics (each service's, not the base URL's), the console's pages (``/`` sends
there) and XProf's UI (HTML for browsers; the proxy's API part is documented)."""


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    return service_documents()


@pytest.fixture(scope="module")
def document(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return merge(documents)


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield method, path, operation


def _response(document: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """A response object, its ``$ref`` to the shared ones followed."""
    ref = response.get("$ref")
    if ref is None:
        return response
    shared: dict[str, Any] = document["components"]["responses"][ref.rsplit("/", 1)[-1]]
    return shared


def test_the_committed_document_matches_the_services(document: dict[str, Any]) -> None:
    assert default_path() == COMMITTED
    assert COMMITTED.exists(), "schemas/contracts/openapi.json is missing: run `make contracts`"
    assert COMMITTED.read_text() == render(document), (
        "schemas/contracts/openapi.json differs from what the services describe: if the "
        "change is intended, run `make contracts` and commit the result"
    )


def test_every_route_a_service_registers_is_in_the_document(document: dict[str, Any]) -> None:
    documented = {(method, path) for method, path, _ in _operations(document)}
    expected = set()
    for service in SERVICES:
        module = __import__(SERVICE_APPS[service], fromlist=["create_app"])
        app: FastAPI = module.create_app()
        for context in iter_route_contexts(app.routes):
            if not isinstance(context.original_route, APIRoute):
                continue  # the console's static files (a mount)
            path = (context.path or "").replace(":path}", "}")
            if not context.include_in_schema:
                hidden = path == "/" or path.startswith(UNDOCUMENTED)
                assert hidden, f"{service} hides {path} from the document"
                continue
            for method in (context.methods or set()) - {"HEAD"}:
                expected.add((method.lower(), path))
    assert expected - documented == set()
    assert documented - expected == set()
    assert len(documented) > 150


def test_every_operation_documents_the_real_error_body(document: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in json.dumps(document)
    for method, path, operation in _operations(document):
        responses = operation["responses"]
        assert "422" not in responses, f"{method} {path} documents FastAPI's 422"
        body = "VertexErrorBody" if operation["tags"] == ["training"] else "ErrorBody"
        for status in ("400", "401", "403", "404", "4XX", "5XX"):
            assert status in responses, f"{method} {path} does not document {status}"
            content = _response(document, responses[status])["content"]
            schema = content["application/json"]["schema"]
            assert schema == {"$ref": f"#/components/schemas/{body}"}, (method, path, status)


def test_every_success_names_its_body(document: dict[str, Any]) -> None:
    untyped = []
    for method, path, operation in _operations(document):
        successes = {s: r for s, r in operation["responses"].items() if s.startswith("2")}
        assert successes or "303" in operation["responses"], f"{method} {path}: no success"
        for status, response in successes.items():
            for media, content in response.get("content", {}).items():
                if content.get("schema") in (None, {}) and media != "*/*":
                    untyped.append(f"{method} {path} {status} {media}")
    assert untyped == []


def test_one_base_url_with_a_bearer_token(document: dict[str, Any]) -> None:
    assert document["servers"] == [
        {"url": "http://127.0.0.1:8080", "description": "The edge `mldiag up` starts."}
    ]
    assert document["security"] == [{SECURITY_SCHEME: []}]
    scheme = document["components"]["securitySchemes"][SECURITY_SCHEME]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    ids = [operation["operationId"] for _, _, operation in _operations(document)]
    assert len(ids) == len(set(ids))
    refs = {
        ref.rsplit("/", 1)[-1] for ref in _refs(document) if ref.startswith("#/components/schemas/")
    }
    assert refs <= set(document["components"]["schemas"]), "a reference names no schema"


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_schemathesis_reads_every_operation(document: dict[str, Any]) -> None:
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(1 for _ in _operations(document))


def _stand_in(paths: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    return {"openapi": "3.1.0", "paths": paths, "components": {"schemas": schemas}}


def _operation(ref: str, operation_id: str = "op") -> dict[str, Any]:
    content = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}
    return {"get": {"operationId": operation_id, "responses": {"200": {"content": content}}}}


def test_merging_renames_schemas_that_differ_and_shares_those_that_do_not() -> None:
    merged = merge(
        {
            "run-registry": _stand_in(
                {"/v1/machineLearningRuns": _operation("LogStream")},
                {"LogStream": {"enum": ["STDOUT"]}, "Same": {"type": "string"}},
            ),
            "training": _stand_in(
                {"/v1/customJobs": _operation("LogStream")},
                {"LogStream": {"enum": ["stdout"]}, "Same": {"type": "string"}},
            ),
        },
        api_version="9.9.9",
    )
    assert set(merged["components"]["schemas"]) == {
        "RunRegistryLogStream",
        "TrainingLogStream",
        "Same",
    }
    runs = merged["paths"]["/v1/machineLearningRuns"]["get"]
    jobs = merged["paths"]["/v1/customJobs"]["get"]
    assert runs["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunRegistryLogStream"
    }
    assert jobs["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TrainingLogStream"
    }
    assert (runs["operationId"], jobs["operationId"]) == ("op", "training_op")
    assert (runs["tags"], jobs["tags"]) == (["run-registry"], ["training"])
    assert merged["info"]["version"] == "9.9.9"


def test_merging_refuses_a_path_the_edge_sends_to_another_service() -> None:
    with pytest.raises(ValueError, match="which the edge sends to run-registry"):
        merge({"training": _stand_in({"/v1/machineLearningRuns": _operation("X")}, {})})
    table = RouteTable((Route("/", "a", "everything"),))
    merged = merge({"a": _stand_in({"/v1/customJobs": _operation("X")}, {})}, routes=table)
    assert list(merged["paths"]) == ["/v1/customJobs"]


_NO_IO = """
import socket, sys
def refuse(*args, **kwargs):
    raise AssertionError(f"network I/O while building the document: {args!r}")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import mldiag_platform.edge.app, mldiag_platform.edge.openapi as openapi
services = ("mldiag_run_registry", "mldiag_ingestion", "mldiag_training",
            "mldiag_xprof_provisioner", "mldiag_notifier")
loaded = [name for name in sys.modules if name.startswith(services)]
assert not loaded, f"the platform imports services at import time: {loaded}"
documents = openapi.service_documents()
print(sorted(documents))
"""


def test_building_the_apps_does_no_network_io_and_the_library_imports_no_service() -> None:
    result = subprocess.run(  # this interpreter, a fixed script
        [sys.executable, "-c", _NO_IO], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.replace("'", '"')) == sorted(SERVICES)


def _serving(app: Any, port: int) -> AbstractAsyncContextManager[str]:
    # The services' lifespans stay off: their documents need no connection.
    return served_on_port(app, port, lifespan="off")


async def test_the_edge_serves_the_merged_document_and_a_docs_page() -> None:
    ports = {service: free_port() for service in SERVICES}
    settings = EdgeSettings(
        port=free_port(),
        run_registry_url=f"http://127.0.0.1:{ports['run-registry']}",
        ingestion_url=f"http://127.0.0.1:{ports['ingestion']}",
        training_url=f"http://127.0.0.1:{ports['training']}",
        xprof_provisioner_url=f"http://127.0.0.1:{ports['xprof-provisioner']}",
        notifier_url=f"http://127.0.0.1:{ports['notifier']}",
        connect_timeout_seconds=2.0,
    )
    edge = Edge(settings)
    async with AsyncExitStack() as stack:
        for service in SERVICES:
            module = __import__(SERVICE_APPS[service], fromlist=["create_app"])
            await stack.enter_async_context(_serving(module.create_app(), ports[service]))
        await stack.enter_async_context(_serving(edge, settings.port))
        base = f"http://127.0.0.1:{settings.port}"
        async with httpx.AsyncClient(base_url=base) as client:
            answer = await client.get("/openapi.json")
            page = await client.get(DOCS_PATH)
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.text == COMMITTED.read_text()
        assert page.status_code == 200
        assert "/openapi.json" in page.text
    await edge.aclose()


async def test_the_document_is_a_503_while_a_service_cannot_answer() -> None:
    registry = free_port()
    settings = EdgeSettings(
        port=free_port(),
        run_registry_url=f"http://127.0.0.1:{registry}",
        ingestion_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        connect_timeout_seconds=2.0,
    )
    edge = Edge(settings)
    module = __import__(SERVICE_APPS["run-registry"], fromlist=["create_app"])
    async with (
        _serving(module.create_app(), registry),
        _serving(edge, settings.port),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{settings.port}") as client,
    ):
        answer = await client.get("/openapi.json")
    await edge.aclose()
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "unavailable"
    assert answer.json()["error"]["details"] == [{"service": "ingestion"}]


def test_a_body_shaped_unlike_the_answer_keeps_its_own_schema(document: dict[str, Any]) -> None:
    # A proto int64 is a string in what training sends and a number (or numeric string) in
    # what it accepts: the answer's schema must not be replaced by the body's.
    schemas = document["components"]["schemas"]
    assert schemas["WorkerPoolSpec"]["properties"]["replicaCount"]["type"] == "string"
    assert schemas["WorkerPoolSpecInput"]["properties"]["replicaCount"]["type"] == "integer"
    sent = schemas["CustomJobSpec"]["properties"]["workerPoolSpecs"]["items"]
    accepted = schemas["CustomJobSpecInput"]["properties"]["workerPoolSpecs"]["items"]
    assert sent == {"$ref": "#/components/schemas/WorkerPoolSpec"}
    assert accepted == {"$ref": "#/components/schemas/WorkerPoolSpecInput"}

"""One OpenAPI document for the one base URL: every service's document, merged by the edge's
route table.

Each service's FastAPI app describes its own routes from the pydantic contracts. Users see
one address, so they get one document: the paths of every service (each checked to be routed
to the service that documents it), the components of all (identical schemas shared, schemas
that differ under one name prefixed with their service's name), operation ids kept unique,
each operation tagged with its service, the bearer token as the security scheme and the
edge's default address as the server.

``python -m mldiag_platform.edge.openapi [FILE]`` writes it (``make contracts``; the default
is ``schemas/contracts/openapi.json`` in a source checkout): it builds each service's app
(imported here, inside a function: the platform library never imports a service at import
time, and building an app does no I/O) and merges their documents. The edge serves the same
merge at ``GET /openapi.json`` from the documents its running services answer.
"""

import importlib
import json
import re
import sys
from collections.abc import Mapping
from copy import deepcopy
from importlib.metadata import version
from pathlib import Path
from typing import Any

from mldiag_platform.edge.routes import (
    INGESTION,
    NOTIFIER,
    RUN_REGISTRY,
    SERVICES,
    TRAINING,
    XPROF_PROVISIONER,
    RouteTable,
)

SERVICE_APPS: Mapping[str, str] = {
    RUN_REGISTRY: "mldiag_run_registry.app",
    INGESTION: "mldiag_ingestion.app",
    TRAINING: "mldiag_training.app",
    XPROF_PROVISIONER: "mldiag_xprof_provisioner.app",
    NOTIFIER: "mldiag_notifier.app",
}
"""The module whose ``create_app()`` builds each service of the route table."""

DOCUMENT_PATH = "/openapi.json"
"""Where a service (FastAPI's default) and the edge answer their documents."""

SERVER_URL = "http://127.0.0.1:8080"
"""The edge's default address (``mldiag up``), the document's one server."""

SECURITY_SCHEME = "bearerAuth"
_SECURITY = {
    SECURITY_SCHEME: {
        "type": "http",
        "scheme": "bearer",
        "description": (
            "An API token (`mldiag tokens create`, or the admin token the platform is "
            "started with) as `Authorization: Bearer <token>`; HTTP Basic with the token as "
            "the password is accepted too. A platform started without auth takes no token."
        ),
    }
}

_REF_PREFIX = "#/components/schemas/"
_PARAMETER = re.compile(r"\{[^}]+\}")


def service_documents() -> dict[str, dict[str, Any]]:
    """Each service's own document, from its app (built here, without I/O)."""
    documents = {}
    for service in SERVICES:
        module = importlib.import_module(SERVICE_APPS[service])
        documents[service] = module.create_app().openapi()
    return documents


def merge(
    documents: Mapping[str, dict[str, Any]],
    routes: RouteTable | None = None,
    api_version: str | None = None,
) -> dict[str, Any]:
    """The one document of the base URL from each service's (by service name).

    Raises ``ValueError`` for a path the route table sends to another service than the one
    documenting it: callers of the base URL would never reach it.
    """
    table = routes or RouteTable()
    renamed = _renamed_schemas(documents)
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    operation_ids: set[str] = set()
    for service, original in documents.items():
        document = _with_refs_renamed(deepcopy(original), renamed.get(service, {}))
        for name, schema in document.get("components", {}).get("schemas", {}).items():
            schemas[renamed.get(service, {}).get(name, name)] = schema
        for path, operations in document.get("paths", {}).items():
            routed = table.service_for(_PARAMETER.sub("some-id", path))
            if routed != service:
                raise ValueError(f"{service} documents {path}, which the edge sends to {routed}")
            for operation in operations.values():
                operation["tags"] = [service]
                operation_id = operation.get("operationId")
                if operation_id is not None and operation_id in operation_ids:
                    operation_id = operation["operationId"] = f"{_snake(service)}_{operation_id}"
                operation_ids.add(operation_id)
            paths[path] = operations
    responses = _shared_responses(paths)
    openapi_version = next(iter(documents.values()), {}).get("openapi", "3.1.0")
    return {
        "openapi": openapi_version,
        "info": {
            "title": "mldiag",
            "version": api_version or version("mldiag-platform"),
            "description": (
                "The HTTP API of an mldiag platform at its one base URL (the edge), every "
                "service's routes together. Every failure answers an error body: "
                "`ErrorBody` (`{error: {code, message, details}}`), or on the training "
                "routes the Vertex AI dialect, `VertexErrorBody`."
            ),
        },
        "servers": [{"url": SERVER_URL, "description": "The edge `mldiag up` starts."}],
        "tags": [
            {"name": service, "description": f"Served by {service}."} for service in documents
        ],
        "security": [{SECURITY_SCHEME: []}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "responses": dict(sorted(responses.items())),
            "securitySchemes": _SECURITY,
        },
    }


def _shared_responses(paths: dict[str, Any]) -> dict[str, Any]:
    """Move each failure response that several operations give (the error statuses every
    route documents) to the components, named by its body and status, and refer to it: the
    same answer written once, not once per operation."""
    uses: dict[str, int] = {}
    for operations in paths.values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                if not status.startswith("2"):
                    key = json.dumps([status, response], sort_keys=True)
                    uses[key] = uses.get(key, 0) + 1
    names: dict[str, str] = {}
    shared: dict[str, Any] = {}
    for key in sorted(uses, key=lambda k: (-uses[k], k)):
        if uses[key] < 2:
            continue
        status, response = json.loads(key)
        schema = response.get("content", {}).get("application/json", {}).get("schema", {})
        base = f"{schema.get('$ref', 'Answer').rsplit('/', 1)[-1]}{status}"
        name = base
        while name in shared:
            name = f"{base}_{len([n for n in shared if n.startswith(base)])}"
        names[key] = name
        shared[name] = response
    for operations in paths.values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                key = json.dumps([status, response], sort_keys=True)
                if key in names:
                    operation["responses"][status] = {
                        "$ref": f"#/components/responses/{names[key]}"
                    }
    return shared


def _renamed_schemas(documents: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """For each service, its schemas whose name another service uses for a different schema,
    with the new name (the service's name in CamelCase before it)."""
    seen: dict[str, list[tuple[str, Any]]] = {}
    for service, document in documents.items():
        for name, schema in document.get("components", {}).get("schemas", {}).items():
            seen.setdefault(name, []).append((service, schema))
    renamed: dict[str, dict[str, str]] = {}
    for name, owners in seen.items():
        if any(schema != owners[0][1] for _, schema in owners[1:]):
            for service, _ in owners:
                renamed.setdefault(service, {})[name] = _camel(service) + name
    return renamed


def _with_refs_renamed(node: Any, renamed: Mapping[str, str]) -> Any:
    if not renamed:
        return node
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            name = ref.removeprefix(_REF_PREFIX)
            node["$ref"] = _REF_PREFIX + renamed.get(name, name)
        for value in node.values():
            _with_refs_renamed(value, renamed)
    elif isinstance(node, list):
        for value in node:
            _with_refs_renamed(value, renamed)
    return node


def _camel(service: str) -> str:
    return "".join(part.capitalize() for part in service.split("-"))


def _snake(service: str) -> str:
    return service.replace("-", "_")


def render(document: dict[str, Any]) -> str:
    """The document as committed: indented JSON ending with a newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def default_path() -> Path:
    """``schemas/contracts/openapi.json`` of the source checkout this module runs from."""
    return Path(__file__).resolve().parents[5] / "schemas" / "contracts" / "openapi.json"


def main() -> None:
    """Write the merged document to FILE (default: :func:`default_path`)."""
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else default_path()
    target.write_text(render(merge(service_documents())))
    sys.stdout.write(f"{target}\n")


if __name__ == "__main__":
    main()

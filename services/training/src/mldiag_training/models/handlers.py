"""HTTP routes of the model registry (Vertex v1 ``models``).

A model is addressed as ``models/{id}`` (its default version), ``models/{id}@{version}`` or
``models/{id}@{alias}``; the SDK sends the ``@`` as ``%40``, which the server decodes before
routing. ``$alt`` is ignored and ``enum-encoding=int`` answers ``sourceType`` as a number.
Query parameters are accepted in camelCase and snake_case.
"""

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from mldiag_platform.http import query_param
from mldiag_platform.resources import ParentDep, id_path
from mldiag_schemas.auth import Permission
from mldiag_schemas.models import (
    ALIAS_PATTERN,
    MODEL_ENUM_FIELDS,
    ListModelsResponse,
    ListModelVersionsResponse,
    MergeVersionAliasesRequest,
    Model,
    ModelOperation,
    UploadModelRequest,
)
from mldiag_training.errors import InvalidResourceId
from mldiag_training.models.service import ModelsService
from mldiag_training.models.validation import parse_merge_aliases, parse_update, parse_upload
from mldiag_training.resources import app_service, checked_id, list_query, route
from mldiag_training.vertex import VertexResponse

router = APIRouter()

_REF = re.compile(rf"^(?:\d{{1,9}}|-|{ALIAS_PATTERN[1:-1]})$")


ServiceDep = Annotated[ModelsService, Depends(app_service("models", ModelsService))]


def _model_name(
    model: Annotated[str, id_path("The model's id, optionally @version or @alias.", r"^.+$")],
) -> str:
    model_id, at, ref = model.partition("@")
    checked_id(model_id, "model_id")
    if at and _REF.fullmatch(ref) is None:
        problem = "name a version (digits) or an alias after '@'"
        raise InvalidResourceId(
            f"invalid model name {model[:80]!r}: {problem}",
            details=[{"field": "model_id", "problem": problem}],
        )
    return model


ModelPath = Annotated[str, Depends(_model_name)]
"""``{id}[@{version or alias}]`` of the path, checked."""


def _operation_id(
    operation_id: Annotated[str, id_path("The operation's id (digits).")],
) -> str:
    return checked_id(operation_id, "operation_id")


def _answer(
    content: Model | ModelOperation | ListModelsResponse | ListModelVersionsResponse,
    request: Request,
) -> Response:
    return VertexResponse(content, request, fields=MODEL_ENUM_FIELDS)


@route(
    router,
    "POST",
    "/models:upload",
    Permission.MODELS_UPLOAD,
    body=UploadModelRequest,
    response=ModelOperation,
)
async def upload_model(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """Register a model (or, with ``parentModel``, its next version) whose files are at
    ``model.artifactUri``; answers the done operation."""
    body = parse_upload(await request.body())
    operation = await service.upload(parent.project, parent.location, body)
    return _answer(operation, request)


@route(router, "GET", "/models", Permission.MODELS_LIST, response=ListModelsResponse)
async def list_models(request: Request, parent: ParentDep, service: ServiceDep) -> Response:
    """List models, each as its default version (newest first unless ``orderBy``), filtered
    by ``filter`` (``display_name="x"``, ``labels.k=v``, ``create_time>"…"``)."""
    page = await service.list_models(
        parent.project,
        parent.location,
        *list_query(request),
    )
    return _answer(page, request)


@route(
    router,
    "GET",
    "/models/{model}:listVersions",
    Permission.MODELS_GET,
    response=ListModelVersionsResponse,
)
async def list_model_versions(
    request: Request, model: ModelPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """A model's versions (oldest first unless ``orderBy``: ``create_time``,
    ``update_time``), filtered by ``filter`` (``labels.k=v``, times)."""
    page = await service.list_versions(
        parent.project,
        parent.location,
        model,
        *list_query(request),
    )
    return _answer(page, request)


@route(
    router,
    "POST",
    "/models/{model}:mergeVersionAliases",
    Permission.MODELS_UPDATE,
    body=MergeVersionAliasesRequest,
    response=Model,
)
async def merge_version_aliases(
    request: Request, model: ModelPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Add (``x``) or remove (``-x``) aliases of ``models/{id}@{version}``; answers the
    version. Adding an alias another version carries moves it (``default`` too)."""
    body = parse_merge_aliases(await request.body())
    updated = await service.merge_aliases(
        parent.project, parent.location, model, body.version_aliases
    )
    return _answer(updated, request)


@route(
    router,
    "DELETE",
    "/models/{model}:deleteVersion",
    Permission.MODELS_DELETE,
    response=ModelOperation,
)
async def delete_model_version(
    request: Request, model: ModelPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Delete ``models/{id}@{version}`` (the SDK's ``delete_version``); the default version
    only when it is the last (the model goes with it)."""
    if "@" not in model:
        model = f"{model}@default"  # Vertex deletes the default version then
    operation = await service.delete(parent.project, parent.location, model)
    return _answer(operation, request)


@route(
    router,
    "GET",
    "/models/{model}/operations/{operation_id}",
    Permission.MODELS_GET,
    response=ModelOperation,
)
async def get_model_operation(
    request: Request,
    model: ModelPath,
    operation_id: Annotated[str, Depends(_operation_id)],
    parent: ParentDep,
    service: ServiceDep,
) -> Response:
    """An upload's or delete's operation (always done)."""
    operation = await service.operation(parent.project, parent.location, model, operation_id)
    return _answer(operation, request)


@route(router, "GET", "/models/{model}", Permission.MODELS_GET, response=Model)
async def get_model(
    request: Request, model: ModelPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """The default version, ``@{version}`` or ``@{alias}``."""
    found = await service.get(parent.project, parent.location, model)
    return _answer(found, request)


@route(router, "PATCH", "/models/{model}", Permission.MODELS_UPDATE, body=Model, response=Model)
async def update_model(
    request: Request, model: ModelPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Change what ``updateMask`` names: ``displayName``, ``description`` (the model's),
    ``versionDescription``, ``labels`` (the version's: the default one without ``@``)."""
    mask = query_param(request, "updateMask", "update_mask") or ""
    body, fields = parse_update(await request.body(), mask)
    updated = await service.update(parent.project, parent.location, model, body, fields)
    return _answer(updated, request)


@route(router, "DELETE", "/models/{model}", Permission.MODELS_DELETE, response=ModelOperation)
async def delete_model(
    request: Request, model: ModelPath, parent: ParentDep, service: ServiceDep
) -> Response:
    """Delete a model and all its versions (``{id}``) or one version (``{id}@{v}``)."""
    operation = await service.delete(parent.project, parent.location, model)
    return _answer(operation, request)

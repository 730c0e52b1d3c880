"""Reading the registry's request bodies as Vertex does, refusing what mldiag cannot honour by
name (the same order as custom jobs': JSON object, unsupported fields as UNIMPLEMENTED,
output-only fields dropped, the strict models, then the rules they cannot say).

A proto3 field holding its default value (``""``, ``false``, ``0``, ``[]``, ``{}``) is not
set, so an unsupported field sent empty (the SDK sends ``explanationSpec: {}``) is not
refused.
"""

import re
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel
from pydantic.alias_generators import to_snake

from mldiag_platform.errors import InvalidArgument
from mldiag_platform.http import parse_body
from mldiag_schemas.ids import RESOURCE_ID_PATTERN
from mldiag_schemas.models import (
    ALIAS_PATTERN,
    DEFAULT_ALIAS,
    OUTPUT_ONLY_MODEL_FIELDS,
    UNSUPPORTED_CONTAINER_FIELDS,
    UNSUPPORTED_MODEL_FIELDS,
    MergeVersionAliasesRequest,
    Model,
    UploadModelRequest,
)
from mldiag_training.jobs.errors import UnsupportedField
from mldiag_training.jobs.validation import OUTPUT_URI_SCHEMES
from mldiag_training.models.errors import InvalidModel, NoModelArtifacts

BaseModelT = TypeVar("BaseModelT", bound=BaseModel)

_ALIAS = re.compile(ALIAS_PATTERN)
_RESOURCE_ID = re.compile(RESOURCE_ID_PATTERN)
_OUTPUT_ONLY = OUTPUT_ONLY_MODEL_FIELDS | {to_snake(name) for name in OUTPUT_ONLY_MODEL_FIELDS}

UPDATABLE_FIELDS = {
    "displayName": "display_name",
    "description": "description",
    "labels": "labels",
    "versionDescription": "version_description",
}
"""What ``updateMask`` may name (camelCase or snake_case), as Model attributes."""

ALIAS_RULE = (
    "lower-case letters, digits and '-', 2 to 128 characters, starting with a letter and"
    " ending alphanumeric"
)


def invalid(field: str, problem: str) -> InvalidModel:
    """INVALID_ARGUMENT naming ``field``."""
    return InvalidModel(f"{field}: {problem}", details=[{"field": field, "problem": problem}])


def _unsupported(field: str, what: str) -> UnsupportedField:
    problem = f"is not supported: mldiag does not provide {what}"
    return UnsupportedField(f"{field} {problem}", details=[{"field": field, "problem": problem}])


def _is_set(value: Any) -> bool:
    return value not in (None, "", False, 0, [], {})


def _refuse_unsupported(document: dict[str, Any], table: dict[str, str], where: str) -> None:
    for camel, what in table.items():
        for key in (camel, to_snake(camel)):
            if key in document:
                if _is_set(document[key]):
                    raise _unsupported(f"{where}{camel}", what)
                del document[key]


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        # jiter bounds nesting, where json.loads would raise RecursionError on a deep body
        document = pydantic_core.from_json(raw or b"{}")
    except ValueError as error:
        raise invalid("", f"the body is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise invalid("", f"the body must be a JSON object ({what})")
    return document


def _clean_model(document: Any, where: str) -> Any:
    """The Model object of a body with unsupported fields refused and output-only fields
    dropped (anything not an object is left to the strict model to refuse)."""
    if not isinstance(document, dict):
        return document
    _refuse_unsupported(document, UNSUPPORTED_MODEL_FIELDS, where)
    container = document.get("containerSpec", document.get("container_spec"))
    if isinstance(container, dict):
        _refuse_unsupported(container, UNSUPPORTED_CONTAINER_FIELDS, f"{where}containerSpec.")
    return {key: value for key, value in document.items() if key not in _OUTPUT_ONLY}


def _parse(kind: type[BaseModelT], document: dict[str, Any]) -> BaseModelT:
    try:
        return parse_body(kind, pydantic_core.to_json(document), error=InvalidModel)
    except InvalidArgument as error:
        if not error.details:
            raise
        first = error.details[0]
        more = f" (and {len(error.details) - 1} more)" if len(error.details) > 1 else ""
        message = f"{first.get('field') or 'the body'}: {first.get('problem', '')}{more}"
        raise InvalidModel(message, details=error.details) from None


def parse_upload(raw: bytes) -> UploadModelRequest:
    """The UploadModelRequest a ``models:upload`` body describes, or INVALID_ARGUMENT /
    UNIMPLEMENTED naming the field. The files behind ``artifactUri`` are checked by the
    service."""
    document = _json_object(raw, "an UploadModelRequest")
    if "model" in document:
        document["model"] = _clean_model(document["model"], "model.")
    for key in ("serviceAccount", "service_account"):
        if _is_set(document.get(key)):
            raise _unsupported("serviceAccount", "service accounts for uploads")
    request = _parse(UploadModelRequest, document)
    check_model(request.model, "model.")
    if request.model_id and _RESOURCE_ID.fullmatch(request.model_id) is None:
        raise invalid(
            "modelId", "is not a valid id: use lower-case letters, digits and '-', 1 to 63"
        )
    if request.model_id and request.parent_model:
        raise invalid("modelId", "set modelId or parentModel, not both")
    return request


def check_model(model: Model, where: str = "model.") -> None:
    """The rules of an uploaded (or imported) model its contract cannot say."""
    if not model.artifact_uri:
        problem = (
            "is required: the gs:// or file:// folder holding the model's files (mldiag"
            " registers files; it has no prebuilt serving containers)"
        )
        raise NoModelArtifacts(
            f"{where}artifactUri {problem}",
            details=[{"field": f"{where}artifactUri", "problem": problem}],
        )
    if not any(
        model.artifact_uri.startswith(scheme) and len(model.artifact_uri) > len(scheme)
        for scheme in OUTPUT_URI_SCHEMES
    ):
        raise invalid(
            f"{where}artifactUri",
            f"{model.artifact_uri[:200]!r} is not a gs://BUCKET/PATH or file:///PATH URI",
        )
    check_aliases(model.version_aliases, f"{where}versionAliases", removals=False)


def check_aliases(aliases: list[str], field: str, *, removals: bool) -> None:
    """Each alias follows :data:`ALIAS_PATTERN` (``-alias`` too when ``removals``); none
    looks like a version number; none is named twice."""
    seen: set[str] = set()
    for index, alias in enumerate(aliases):
        name = alias[1:] if removals and alias.startswith("-") else alias
        where = f"{field}[{index}]"
        if name.isdigit():
            raise invalid(where, f"{alias[:130]!r} looks like a version id: aliases are names")
        if _ALIAS.fullmatch(name) is None:
            raise invalid(where, f"{alias[:130]!r} is not a valid alias: use {ALIAS_RULE}")
        if name in seen:
            raise invalid(where, f"{name!r} is named twice")
        seen.add(name)


def parse_merge_aliases(raw: bytes) -> MergeVersionAliasesRequest:
    """A mergeVersionAliases body: at least one alias, each valid (``-`` removes)."""
    document = _json_object(raw, "a MergeVersionAliasesRequest")
    document.pop("name", None)  # the path names the version
    request = _parse(MergeVersionAliasesRequest, document)
    if not request.version_aliases:
        raise invalid("versionAliases", "name at least one alias to add or (with -) remove")
    check_aliases(request.version_aliases, "versionAliases", removals=True)
    if f"-{DEFAULT_ALIAS}" in request.version_aliases:
        raise invalid(
            "versionAliases",
            "'default' cannot be removed: add it to another version to move it",
        )
    return request


def parse_update(raw: bytes, update_mask: str) -> tuple[Model, list[str]]:
    """A PATCH body (a Model) and its ``updateMask`` as Model attribute names (none empty,
    each updatable); the body's other fields are ignored, as Vertex ignores them."""
    paths = [path.strip() for path in update_mask.split(",") if path.strip()]
    if not paths:
        raise invalid(
            "updateMask", "name the fields to change: displayName, description, labels, ..."
        )
    fields: list[str] = []
    for path in paths:
        attribute = UPDATABLE_FIELDS.get(path) or (
            path if path in UPDATABLE_FIELDS.values() else None
        )
        if attribute is None:
            raise invalid(
                "updateMask",
                f"{path[:100]!r} cannot be updated: use {', '.join(UPDATABLE_FIELDS)}",
            )
        fields.append(attribute)
    document = _json_object(raw, "a Model")
    # Fields outside the mask are ignored, as Vertex does (the SDK sends the whole Model back).
    document = {
        key: value
        for key, value in document.items()
        if key in UPDATABLE_FIELDS or key in UPDATABLE_FIELDS.values()
    }
    if "display_name" not in fields:
        # The strict model needs one; a PATCH that does not change it may leave it out.
        document.pop("displayName", None)
        document["display_name"] = "-"
    elif not document.get("displayName", document.get("display_name")):
        raise invalid("displayName", "cannot be made empty")
    return _parse(Model, document), fields

"""Speaking Vertex AI's REST dialect: proto3 JSON responses (enums as numbers when the
request asks for ``enum-encoding=int``) and google.rpc.Status error bodies.

The Vertex SDK sends ``?$alt=json;enum-encoding=int`` on every request. ``$alt`` is ignored
(JSON is all this API speaks); ``enum-encoding=int`` turns every Vertex enum of the answer
into its proto number (:data:`mldiag_schemas.jobs.ENUM_NUMBERS`).

Errors are ``{"error": {"code": <HTTP status>, "message", "status": <canonical code name>,
"details": [...]}}``, so Google's client libraries raise the matching exception. The
details always start with a ``google.rpc.ErrorInfo`` whose ``reason`` is mldiag's stable
code (``invalid_argument``, ``invalid_page_token``, ...); failing fields follow as a
``google.rpc.BadRequest``.
"""

import enum
from collections.abc import Iterator
from typing import Any

import pydantic_core
from fastapi import Request, Response
from pydantic import BaseModel

from mldiag_platform.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    MldiagError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
)
from mldiag_platform.http import ErrorShape
from mldiag_schemas.jobs import (
    ENUM_FIELDS,
    ENUM_NUMBERS,
    ERROR_DOMAIN,
    ERROR_INFO_TYPE,
    VertexErrorBody,
    VertexErrorStatus,
)

BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"

_CANONICAL: dict[type[MldiagError], str] = {
    InvalidArgument: "INVALID_ARGUMENT",
    Unauthenticated: "UNAUTHENTICATED",
    PermissionDenied: "PERMISSION_DENIED",
    NotFound: "NOT_FOUND",
    AlreadyExists: "ALREADY_EXISTS",
    FailedPrecondition: "FAILED_PRECONDITION",
    PayloadTooLarge: "INVALID_ARGUMENT",
    ResourceExhausted: "RESOURCE_EXHAUSTED",
    Unimplemented: "UNIMPLEMENTED",
    Unavailable: "UNAVAILABLE",
    MldiagError: "INTERNAL",
}
"""google.rpc.Code names of the platform's error bases; a service's own errors take their
base's."""

_CANONICAL_BY_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
}
"""For codes no error class carries (routing's 404 and 405, say)."""

_GOOGLE_STATUS = {"FAILED_PRECONDITION": 400}
"""Where Google's HTTP mapping of a canonical code differs from mldiag's: a failed
precondition is a 400 there (mldiag answers 409), and the SDK picks its exception by it."""


def _error_classes(base: type[MldiagError] = MldiagError) -> Iterator[type[MldiagError]]:
    for subclass in base.__subclasses__():
        yield subclass
        yield from _error_classes(subclass)


def canonical_code(status: int, code: str) -> str:
    """The google.rpc.Code name for an mldiag error ``code`` answered with ``status``."""
    for kind in _error_classes():
        if kind.code == code:
            canonical = next(_CANONICAL[base] for base in kind.__mro__ if base in _CANONICAL)
            # A class straight under MldiagError names no canonical code of its own (another
            # package's 405, say, when several are loaded): its status says more.
            if canonical != "INTERNAL" or status >= 500:
                return canonical
            break
    if code == MldiagError.code:
        return "INTERNAL"
    return _CANONICAL_BY_STATUS.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")


def vertex_error_body(
    status: int, code: str, message: str, details: list[Any]
) -> tuple[int, VertexErrorBody]:
    """The HTTP status and Vertex body of a failure (``code`` is mldiag's stable code)."""
    canonical = canonical_code(status, code)
    status = _GOOGLE_STATUS.get(canonical, status)
    info: dict[str, Any] = {"@type": ERROR_INFO_TYPE, "reason": code, "domain": ERROR_DOMAIN}
    violations = [
        {"field": str(detail["field"]), "description": str(detail.get("problem", ""))}
        for detail in details
        if isinstance(detail, dict) and "field" in detail
    ]
    rest = [d for d in details if not (isinstance(d, dict) and "field" in d)]
    typed = [info]
    if violations:
        typed.append({"@type": BAD_REQUEST_TYPE, "fieldViolations": violations})
    error = VertexErrorStatus(
        code=status, message=message, status=canonical, details=[*typed, *rest]
    )
    return status, VertexErrorBody(error=error)


def vertex_error_response(status: int, code: str, message: str, details: list[Any]) -> Response:
    """A failure as Vertex answers it (see :func:`vertex_error_body`)."""
    status, body = vertex_error_body(status, code, message, details)
    return Response(body.model_dump_json(), status_code=status, media_type="application/json")


VERTEX_ERRORS = ErrorShape(VertexErrorBody, vertex_error_response)
"""The error shape the training service is built with."""


def wants_enum_numbers(request: Request) -> bool:
    """Whether the request asked for ``enum-encoding=int`` (inside ``$alt``, as the SDK sends
    it, or as a parameter of its own)."""
    for name, value in request.query_params.multi_items():
        if name == "enum-encoding":
            return value == "int"
        if name == "$alt" and "enum-encoding=int" in (part.strip() for part in value.split(";")):
            return True
    return False


EnumFields = dict[str, dict[str, int]]
"""The camelCase keys of a resource's JSON that hold an enum, each with its names' numbers."""

CUSTOM_JOB_ENUM_FIELDS: EnumFields = {
    field: ENUM_NUMBERS[kind] for field, kind in ENUM_FIELDS.items()
}


def enums_as_numbers(document: Any, fields: EnumFields = CUSTOM_JOB_ENUM_FIELDS) -> Any:
    """``document`` (proto3 JSON) with every Vertex enum name turned into its number.

    Only the keys of ``fields`` holding one of their enum's names change, so a ``state``
    that is not a Vertex enum (a replica's) is left alone.
    """
    if isinstance(document, dict):
        converted: dict[str, Any] = {}
        for key, value in document.items():
            numbers = fields.get(key)
            if numbers is not None and isinstance(value, str) and value in numbers:
                converted[key] = numbers[value]
            else:
                converted[key] = enums_as_numbers(value, fields)
        return converted
    if isinstance(document, list):
        return [enums_as_numbers(item, fields) for item in document]
    return document


def encode(
    model: BaseModel, *, enum_numbers: bool, fields: EnumFields = CUSTOM_JOB_ENUM_FIELDS
) -> bytes:
    """A contract model as proto3 JSON: unset (None) fields left out, as Google's APIs
    leave out unset message fields; its enums (the keys of ``fields``) as numbers if
    ``enum_numbers``."""
    if not enum_numbers:
        return model.model_dump_json(exclude_none=True).encode()
    document = model.model_dump(mode="json", exclude_none=True)
    return pydantic_core.to_json(enums_as_numbers(document, fields))


class VertexResponse(Response):
    """A JSON answer rendered by :func:`encode` (names, or numbers when asked)."""

    media_type = "application/json"

    def __init__(
        self,
        content: BaseModel,
        request: Request,
        status_code: int = 200,
        fields: EnumFields = CUSTOM_JOB_ENUM_FIELDS,
    ) -> None:
        self._enum_numbers = wants_enum_numbers(request)
        self._fields = fields
        super().__init__(content, status_code=status_code)

    def render(self, content: Any) -> bytes:
        """Serialise the contract model."""
        if not isinstance(content, BaseModel):
            raise TypeError(f"VertexResponse needs a pydantic model, got {type(content)!r}")
        return encode(content, enum_numbers=self._enum_numbers, fields=self._fields)


def enum_name(
    kind: type[enum.StrEnum], value: str | int, numbers: dict[str, int] | None = None
) -> str:
    """An enum's name from its name or proto number (``numbers``: by default its row of
    ``ENUM_NUMBERS``), for query parameters and filters; raises ``ValueError`` otherwise."""
    numbers = numbers or ENUM_NUMBERS[kind]
    if isinstance(value, int) or value.isdigit():
        names = {number: name for name, number in numbers.items()}
        if int(value) in names:
            return names[int(value)]
    if value in numbers:
        return value
    raise ValueError(f"{value!r} is not a {kind.__name__}")

"""The error base every mldiag package derives from, with stable codes.

Domain code raises these; exactly one boundary per transport maps them (``http.py`` to
status codes, ``bus/consumer.py`` to retry or dead-letter).
"""

from typing import Any, ClassVar


class MldiagError(Exception):
    """Base of every expected error. ``code`` is stable; ``message`` is for people."""

    code: ClassVar[str] = "internal"
    http_status: ClassVar[int] = 500
    retryable: ClassVar[bool] = True
    """Whether a bus consumer should retry a message that raised it."""

    def __init__(self, message: str, *, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class InvalidArgument(MldiagError):
    """The request is malformed or violates a rule."""

    code = "invalid_argument"
    http_status = 400
    retryable = False


class Unauthenticated(MldiagError):
    """No or bad credentials."""

    code = "unauthenticated"
    http_status = 401
    retryable = False


class PermissionDenied(MldiagError):
    """The caller is known but its role does not grant what it asked for."""

    code = "permission_denied"
    http_status = 403
    retryable = False


class NotFound(MldiagError):
    """The named resource does not exist."""

    code = "not_found"
    http_status = 404
    retryable = False


class AlreadyExists(MldiagError):
    """A resource with that name exists already."""

    code = "already_exists"
    http_status = 409
    retryable = False


class FailedPrecondition(MldiagError):
    """The resource is not in a state that allows the request."""

    code = "failed_precondition"
    http_status = 409
    retryable = False


class PayloadTooLarge(MldiagError):
    """The request is bigger than the configured limit."""

    code = "payload_too_large"
    http_status = 413
    retryable = False


class ResourceExhausted(MldiagError):
    """A quota or capacity limit is reached."""

    code = "resource_exhausted"
    http_status = 429
    retryable = True


class Unimplemented(MldiagError):
    """The request asks for something this API knows but does not provide."""

    code = "unimplemented"
    http_status = 501
    retryable = False


class Unavailable(MldiagError):
    """A dependency (NATS, PostgreSQL, storage) cannot be reached right now."""

    code = "unavailable"
    http_status = 503
    retryable = True


class InvalidPageToken(InvalidArgument):
    """A list's page token was not issued by this API for this query (or is corrupt)."""

    code = "invalid_page_token"


class InvalidPageSize(InvalidArgument):
    """A list's page size is out of range."""

    code = "invalid_page_size"


class InvalidFilter(InvalidArgument):
    """A list's ``filter`` does not parse or names an unknown field (details: position)."""

    code = "invalid_filter"


class InvalidOrderBy(InvalidArgument):
    """A list's ``orderBy`` names an unknown field or is malformed."""

    code = "invalid_order_by"

"""The error body every HTTP API returns."""

from typing import Any

from pydantic import Field

from mldiag_schemas.base import Contract


class ErrorDetail(Contract):
    """What went wrong."""

    code: str = Field(description="Stable machine-readable code, e.g. `invalid_argument`.")
    message: str = Field(description="What went wrong, for people.")
    details: list[dict[str, Any]] = Field(
        default_factory=list, description="Structured specifics (e.g. failing fields)."
    )


class ErrorBody(Contract):
    """`{"error": {...}}`, the body of every 4xx and 5xx."""

    error: ErrorDetail = Field(description="The error.")

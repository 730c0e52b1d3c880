"""Long-running operations (AIP-151): what every write of the registry returns."""

import enum
from datetime import datetime

from pydantic import Field

from mldiag_schemas.base import Contract
from mldiag_schemas.profiling import ProfilerSession
from mldiag_schemas.runs import Run


class OperationVerb(enum.StrEnum):
    """What the operation does."""

    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    CAPTURE = "capture"
    """A profile capture: pending until the xprof-provisioner finishes it."""


class OperationMetadata(Contract):
    """What an operation is about and when it ran."""

    verb: OperationVerb = Field(description="create, update, delete or capture.")
    target: str = Field(description="Resource name of the resource the operation acts on.")
    create_time: datetime = Field(description="When the operation started.")
    end_time: datetime | None = Field(default=None, description="When it finished.")
    cancel_requested: bool = Field(
        default=False, description="Whether a cancel was requested before it finished."
    )


class OperationError(Contract):
    """Why an operation failed (``google.rpc.Status`` shape, with our stable code)."""

    code: str = Field(description="Stable machine-readable code, e.g. `etag_mismatch`.")
    message: str = Field(description="What went wrong, for people.")


class Operation(Contract):
    """A long-running operation. Registry writes finish before they answer, so ``done`` is
    true on return; a capture is done once the xprof-provisioner finished it. Operations are
    stored so clients can get, list, wait on them.
    """

    name: str = Field(description="projects/{p}/locations/{l}/operations/{id}.")
    done: bool = Field(description="Whether it finished (then response or error is set).")
    metadata: OperationMetadata = Field(description="What it is about.")
    response: Run | ProfilerSession | None = Field(
        default=None,
        description="The resource, when it succeeded: the run, or a capture's session.",
    )
    error: OperationError | None = Field(default=None, description="Why it failed.")


class ListOperationsResponse(Contract):
    """A page of operations, newest first."""

    operations: list[Operation] = Field(description="The operations on this page.")
    next_page_token: str = Field(default="", description="Token of the next page; empty at end.")


class WaitOperationRequest(Contract):
    """Body of `POST .../operations/{id}:wait`."""

    timeout: str | None = Field(
        default=None,
        description="How long to wait at most, as a duration like `5s` (default 30s, max 60s).",
    )

"""Operations: reading, waiting on, cancelling and forgetting them (no SQL here).

Every registry write finishes before it answers, so the operations it returns are already
done; a profile capture's stays pending until the xprof-provisioner finishes it, and
``:wait`` polls its row until then. Cancelling a done operation is refused with
``operation_already_done`` (409): it could change nothing, and saying so is clearer than a
success that did nothing.
"""

import asyncio
import re
import time
import uuid

import structlog

from mldiag_platform.errors import InvalidPageToken
from mldiag_platform.listing.filtering import FieldSpec, Kind, field_table, parse_filter
from mldiag_platform.listing.paging import (
    decode_token,
    encode_token,
    page_size,
    token_text,
    token_time,
)
from mldiag_run_registry.operations.errors import (
    InvalidOperationId,
    InvalidTimeout,
    OperationAlreadyDone,
    OperationNotFound,
)
from mldiag_run_registry.operations.repository import OperationsRepository, operation_name
from mldiag_schemas.ids import is_run_id
from mldiag_schemas.operations import ListOperationsResponse, Operation, OperationVerb

log = structlog.get_logger(__name__)

DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 1000
DEFAULT_WAIT_SECONDS = 30.0
MAX_WAIT_SECONDS = 60.0
_POLL_SECONDS = 0.1
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")

FIELDS = field_table(
    (
        FieldSpec("done", Kind.BOOL),
        FieldSpec(
            "metadata.verb",
            Kind.ENUM,
            aliases=("verb",),
            normalise=lambda v: v.lower() if v.lower() in set(OperationVerb) else None,
        ),
        FieldSpec("metadata.target", Kind.STRING, aliases=("target",)),
    )
)
"""What an operations filter may name."""


def new_operation_id() -> str:
    """A fresh operation id (also a valid resource id)."""
    return str(uuid.uuid4())


def parse_timeout(text: str | None) -> float:
    """A wait timeout (``"5s"``, ``"0.5s"``) in seconds, capped at the maximum."""
    if text is None or text == "":
        return DEFAULT_WAIT_SECONDS
    match = _DURATION.match(text)
    if not match:
        raise InvalidTimeout(f"invalid timeout {text!r}: use a duration like '5s'")
    return min(float(match.group(1)), MAX_WAIT_SECONDS)


class OperationsService:
    """The operations resource."""

    def __init__(self, repository: OperationsRepository) -> None:
        self._repository = repository

    async def get(self, project: str, location: str, operation_id: str) -> Operation:
        """The operation, or :class:`OperationNotFound`."""
        if not is_run_id(operation_id):
            raise InvalidOperationId(f"invalid operation id {operation_id!r}")
        operation = await self._repository.get(project, location, operation_id)
        if operation is None:
            name = operation_name(project, location, operation_id)
            raise OperationNotFound(f"operation {name!r} not found")
        return operation

    async def list_operations(
        self,
        project: str,
        location: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str,
    ) -> ListOperationsResponse:
        """A page of operations, newest first, optionally filtered (``done = true``)."""
        size = page_size(requested_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        where = parse_filter(filter_text, FIELDS)
        after = None
        if page_token:
            fields = decode_token(page_token)
            if fields.get("f") != filter_text:
                raise InvalidPageToken("the page token is not valid for this query")
            after = (token_time(fields.get("t")), token_text(fields.get("o")))
        found = await self._repository.list_operations(project, location, where, size + 1, after)
        token = ""
        if len(found) > size:
            found = found[:size]
            last = found[-1]
            token = encode_token(
                {
                    "t": last.metadata.create_time.isoformat(),
                    "o": last.name.rsplit("/", 1)[-1],
                    "f": filter_text,
                }
            )
        return ListOperationsResponse(operations=found, next_page_token=token)

    async def wait(
        self, project: str, location: str, operation_id: str, seconds: float
    ) -> Operation:
        """The operation once done, or as it is when ``seconds`` have passed."""
        deadline = time.monotonic() + seconds
        while True:
            operation = await self.get(project, location, operation_id)
            if operation.done or time.monotonic() >= deadline:
                return operation
            await asyncio.sleep(min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    async def cancel(self, project: str, location: str, operation_id: str) -> None:
        """Ask a running operation to stop; refused when it is done."""
        operation = await self.get(project, location, operation_id)
        if operation.done:
            raise OperationAlreadyDone(
                f"operation {operation.name!r} is already done; there is nothing to cancel"
            )
        await self._repository.request_cancel(project, location, operation_id)
        log.info("operation.cancel_requested", operation=operation.name)

    async def delete(self, project: str, location: str, operation_id: str) -> None:
        """Forget an operation (the resource it acted on is untouched)."""
        await self.get(project, location, operation_id)
        await self._repository.delete(project, location, operation_id)
        log.info("operation.deleted", operation_id=operation_id, project=project)

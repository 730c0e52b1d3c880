"""Errors about operations."""

from mldiag_platform.errors import FailedPrecondition, InvalidArgument, NotFound


class OperationNotFound(NotFound):
    """No operation with that name."""

    code = "operation_not_found"


class OperationAlreadyDone(FailedPrecondition):
    """Cancelling an operation that has finished changes nothing, so it is refused."""

    code = "operation_already_done"


class InvalidOperationId(InvalidArgument):
    """An operation id in the path is not a valid id."""

    code = "invalid_operation_id"


class InvalidTimeout(InvalidArgument):
    """A wait timeout is not a duration like ``5s`` within the allowed range."""

    code = "invalid_timeout"

"""Errors about runs."""

from mldiag_platform.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)


class RunNotFound(NotFound):
    """No run with that name (or it was deleted)."""

    code = "run_not_found"


class RunAlreadyExists(AlreadyExists):
    """A run with that id exists already (a deleted run keeps its id)."""

    code = "run_already_exists"


class EtagMismatch(FailedPrecondition):
    """The etag sent is not the run's current one: someone changed it since it was read."""

    code = "etag_mismatch"


class EtagRequired(InvalidArgument):
    """An update must carry the etag of the run it read."""

    code = "etag_required"


class InvalidUpdateMask(InvalidArgument):
    """The update mask names a field that does not exist or cannot be set."""

    code = "invalid_update_mask"


class RunEnded(FailedPrecondition):
    """The run is COMPLETED or FAILED: only a resume (runPhase ACTIVE, same workloadId)
    may change it. Keeps the generic ``failed_precondition`` code.
    """


class RunWasDeleted(FailedPrecondition):
    """The workload's run was deleted; its id cannot be reused."""

    code = "run_deleted"


class LogicalIdRequired(InvalidArgument):
    """The official SDK's upsert (PATCH without a run id) must carry a logicalId."""

    code = "logical_id_required"


class RunNotYetCreated(Unavailable):
    """Configs were reported for a run the registry has not seen yet; the report is retried
    (the run's create may still be on its way) and dead-lettered if it never appears.
    """

    code = "run_not_yet_created"

"""run-registry's errors."""

from mldiag_platform.errors import AlreadyExists, InvalidArgument, NotFound


class RunNotFound(NotFound):
    """No run with that name."""

    code = "run_not_found"


class RunAlreadyExists(AlreadyExists):
    """A run with that id exists already."""

    code = "run_already_exists"


class InvalidPageToken(InvalidArgument):
    """The page token was not issued by this API (or is corrupt)."""

    code = "invalid_page_token"


class InvalidPageSize(InvalidArgument):
    """The page size is out of range."""

    code = "invalid_page_size"


class InvalidRunId(InvalidArgument):
    """A run id in the path is not a valid id."""

    code = "invalid_run_id"

"""Errors about runs."""

from mldiag_platform.errors import AlreadyExists, NotFound


class RunNotFound(NotFound):
    """No run with that name."""

    code = "run_not_found"


class RunAlreadyExists(AlreadyExists):
    """A run with that id exists already."""

    code = "run_already_exists"

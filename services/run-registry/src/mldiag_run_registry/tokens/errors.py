"""Errors about API tokens."""

from mldiag_platform.errors import NotFound


class TokenNotFound(NotFound):
    """No token with that id."""

    code = "token_not_found"

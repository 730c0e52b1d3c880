"""training's errors shared by its parts (each part adds its own in its errors.py).

A list's errors (``invalid_filter``, ``invalid_order_by``, ``invalid_page_size``,
``invalid_page_token``) are the platform's, raised by ``mldiag_platform.listing``.
"""

from typing import TypeVar

from mldiag_platform.errors import InvalidArgument, NotFound

NotFoundError = TypeVar("NotFoundError", bound=NotFound)


class InvalidResourceId(InvalidArgument):
    """A project, location or job id in the path is not a valid id."""

    code = "invalid_resource_id"


def not_found(error: type[NotFoundError], name: str) -> NotFoundError:
    """``error`` for the resource ``name``: "<name> not found", the resource in its details
    (as every NOT_FOUND of the training API answers)."""
    return error(f"{name} not found", details=[{"resource": name}])

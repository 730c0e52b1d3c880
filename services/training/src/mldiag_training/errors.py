"""training's errors shared by its parts (each part adds its own in its errors.py)."""

from mldiag_platform.errors import InvalidArgument


class InvalidPageToken(InvalidArgument):
    """The page token was not issued by this API for this filter and order (or is corrupt)."""

    code = "invalid_page_token"


class InvalidPageSize(InvalidArgument):
    """The page size is out of range."""

    code = "invalid_page_size"


class InvalidFilter(InvalidArgument):
    """A list's ``filter`` does not parse or names an unknown field (details: position)."""

    code = "invalid_filter"


class InvalidOrderBy(InvalidArgument):
    """A list's ``orderBy`` names an unknown field or is malformed."""

    code = "invalid_order_by"


class InvalidResourceId(InvalidArgument):
    """A project, location or job id in the path is not a valid id."""

    code = "invalid_resource_id"

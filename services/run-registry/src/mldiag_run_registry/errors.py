"""run-registry's errors shared by its parts (each part adds its own in its errors.py).

A list's errors (``invalid_filter``, ``invalid_order_by``, ``invalid_page_size``,
``invalid_page_token``) are the platform's, raised by ``mldiag_platform.listing``.
"""

from mldiag_platform.errors import InvalidArgument


class InvalidRunId(InvalidArgument):
    """A run id in the path is not a valid id."""

    code = "invalid_run_id"

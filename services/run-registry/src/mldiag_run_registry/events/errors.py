"""Errors about workload events."""

from mldiag_platform.errors import NotFound


class EventNotFound(NotFound):
    """No event with that id on that run (or the run was deleted)."""

    code = "event_not_found"

"""The one error family of the importers, each with a stable ``code``."""

from __future__ import annotations


class ImportFailed(Exception):
    """Base of the importers' errors: ``code`` is stable, the message is for a person."""

    code = "import_failed"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        """What went wrong, for a person."""


class SourceUnreadable(ImportFailed):
    """The source cannot be read: a missing log directory, an MLflow server that refuses."""

    code = "source_unreadable"


class SourceUnreachable(ImportFailed):
    """Nothing answered at the MLflow tracking URI."""

    code = "source_unreachable"


class BatchRefused(ImportFailed):
    """The platform refused a metric batch as a whole (a 4xx from ``metrics:write``)."""

    code = "batch_refused"


class PlatformUnavailable(ImportFailed):
    """The platform kept failing a batch (network error, 5xx) after the retries."""

    code = "platform_unavailable"

"""Errors of the log query API (each a 400 with its own code)."""

from mldiag_platform.errors import InvalidArgument


class InvalidGrep(InvalidArgument):
    """``grep`` is not a regular expression, or is longer than the cap."""

    code = "invalid_grep"


class InvalidLogTime(InvalidArgument):
    """``since`` / ``until`` is neither an RFC 3339 time nor a duration like ``10m``, or
    ``since`` lies past ``until``."""

    code = "invalid_log_time"


class InvalidLogStream(InvalidArgument):
    """``stream`` names no stream."""

    code = "invalid_log_stream"


class InvalidLogSeverity(InvalidArgument):
    """``minSeverity`` names no severity."""

    code = "invalid_log_severity"


class InvalidLogHost(InvalidArgument):
    """``host`` holds a character no host name has (NUL)."""

    code = "invalid_log_host"

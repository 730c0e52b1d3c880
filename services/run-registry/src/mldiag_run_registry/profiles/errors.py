"""Errors about profiler sessions, targets and captures."""

from mldiag_platform.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound


class SessionNotFound(NotFound):
    """No profiler session with that id on that run (or the run was deleted)."""

    code = "session_not_found"


class SessionExists(AlreadyExists):
    """A capture names a session id the run already has."""

    code = "session_exists"


class UnknownTarget(InvalidArgument):
    """A capture names a host or target id the run never registered (details: the known)."""

    code = "unknown_target"


class NoProfilerTargets(FailedPrecondition):
    """A capture of a run that registered no profiler server: there is nothing to connect to."""

    code = "no_profiler_targets"


class ProgrammaticTraceActive(FailedPrecondition):
    """The workload is tracing itself on a requested host; a second trace would fail there."""

    code = "programmatic_trace_active"


class TimestampInFuture(InvalidArgument):
    """A report's time is too far past its receipt: a wrong clock would pin the host's part
    (the newest report wins) until that time."""

    code = "timestamp_in_future"

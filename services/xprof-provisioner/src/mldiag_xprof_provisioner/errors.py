"""xprof-provisioner's errors, each with a stable code."""

from typing import ClassVar

from mldiag_platform.errors import (
    FailedPrecondition,
    InvalidArgument,
    MldiagError,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)


class InvalidStartRequest(InvalidArgument):
    """The body of a start request does not parse or violates the contract."""

    code = "invalid_start_request"


class InvalidRunId(InvalidArgument):
    """The run id is not a valid id."""

    code = "invalid_run_id"


class InvalidSessionId(InvalidArgument):
    """The session id is not a valid id."""

    code = "invalid_session_id"


class InstanceNotFound(NotFound):
    """No instance has that id (or it was forgotten after it stopped)."""

    # The generic code on purpose: clients treat every unknown resource the same way.
    code = "not_found"


class RunNotFound(NotFound):
    """The store holds no profile session of that run."""

    code = "run_not_found"


class SessionNotFound(NotFound):
    """The run has profiles, but no session of that id with a host's xplane."""

    code = "session_not_found"


class InstanceNotRunning(FailedPrecondition):
    """The instance stopped or failed: open the session again for a fresh one."""

    code = "instance_not_running"


class TooManyInstances(ResourceExhausted):
    """``max_instances`` XProf processes are running or starting already."""

    code = "too_many_instances"


class NoFreePorts(ResourceExhausted):
    """Every port of the instance port range is taken."""

    code = "no_free_ports"


class XProfStartFailed(Unavailable):
    """XProf exited or did not answer within the startup timeout."""

    code = "xprof_start_failed"


class XProfUnreachable(Unavailable):
    """The proxy could not reach a RUNNING instance's XProf."""

    code = "xprof_unreachable"


class XProfNoData(NotFound):
    """XProf failed (a 5xx) to produce a tool's data for the parameters given: an unknown
    host, a tool that needs what the session does not have (HLO for the graph viewer)."""

    code = "xprof_no_data"


class ForbiddenParameter(InvalidArgument):
    """A proxied request carries a query parameter the proxy does not pass on."""

    code = "forbidden_parameter"


class InvalidParameter(InvalidArgument):
    """A proxied request's parameter has a value the proxy refuses (a run not served, a
    path where a name belongs, a bad host in a link)."""

    code = "invalid_parameter"


class ForbiddenRoute(PermissionDenied):
    """A path of XProf that is not the UI or a read-only API (capture, cache generation)."""

    code = "forbidden_route"


class MethodNotAllowed(MldiagError):
    """The proxy answers GET and HEAD only: XProf's UI reads, it never writes."""

    code = "method_not_allowed"
    http_status: ClassVar[int] = 405
    retryable: ClassVar[bool] = False


class WarmFailed(MldiagError):
    """Converting a session for XProf's cache failed (a broken xplane, a timeout)."""

    code = "warm_failed"
    retryable: ClassVar[bool] = False

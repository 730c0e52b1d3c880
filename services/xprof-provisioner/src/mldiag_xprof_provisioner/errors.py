"""xprof-provisioner's errors, each with a stable code."""

from mldiag_platform.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable


class InvalidStartRequest(InvalidArgument):
    """The body of a start request does not parse or violates the contract."""

    code = "invalid_start_request"


class InvalidRunId(InvalidArgument):
    """The run id is not a valid id."""

    code = "invalid_run_id"


class InstanceNotFound(NotFound):
    """No instance has that id (or it was forgotten after it stopped)."""

    # The generic code on purpose: clients treat every unknown resource the same way.
    code = "not_found"


class TooManyInstances(ResourceExhausted):
    """``max_instances`` XProf processes are running or starting already."""

    code = "too_many_instances"


class NoFreePorts(ResourceExhausted):
    """Every port of the instance port range is taken."""

    code = "no_free_ports"


class XProfStartFailed(Unavailable):
    """XProf exited or did not answer within the startup timeout."""

    code = "xprof_start_failed"

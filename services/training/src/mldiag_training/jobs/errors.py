"""Errors of the custom-jobs API. Each keeps the platform base that gives its status."""

from mldiag_platform.errors import FailedPrecondition, InvalidArgument, NotFound, Unimplemented


class InvalidCustomJob(InvalidArgument):
    """A CustomJob body breaks a rule (details name the field)."""

    code = "invalid_argument"


class UnsupportedField(Unimplemented):
    """A Vertex field mldiag knows but does not provide (details name it)."""

    code = "unimplemented"


class CustomJobNotFound(NotFound):
    """No custom job has that name."""

    code = "not_found"


class JobNotCancellable(FailedPrecondition):
    """The job has ended: there is nothing to cancel."""

    code = "job_ended"


class JobNotTerminal(FailedPrecondition):
    """Only a job that has ended may be deleted."""

    code = "job_not_ended"

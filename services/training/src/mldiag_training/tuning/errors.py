"""Errors of the hyperparameterTuningJobs API. Each keeps the platform base that gives its
status."""

from mldiag_platform.errors import FailedPrecondition, InvalidArgument, NotFound, Unimplemented


class InvalidTuningJob(InvalidArgument):
    """A HyperparameterTuningJob body breaks a rule (details name the field)."""

    code = "invalid_argument"


class UnsupportedTuningField(Unimplemented):
    """A Vertex field mldiag knows but does not provide (details name it)."""

    code = "unimplemented"


class TuningJobNotFound(NotFound):
    """No tuning job has that name."""

    code = "not_found"


class TuningJobNotCancellable(FailedPrecondition):
    """The tuning job has ended: there is nothing to cancel."""

    code = "job_ended"


class TuningJobNotTerminal(FailedPrecondition):
    """Only a tuning job that has ended may be deleted."""

    code = "job_not_ended"

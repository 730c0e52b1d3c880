"""Errors about retention policies and purges."""

from mldiag_platform.errors import FailedPrecondition, InvalidArgument


class InvalidRetentionPolicy(InvalidArgument):
    """A policy body or the policy it would leave is invalid: a negative or too long period,
    or rollups kept for less time than the raw points they summarise."""

    code = "invalid_retention_policy"


class RunNotDeleted(FailedPrecondition):
    """Only a deleted run can be purged: delete it first (its data stays until it is purged).

    A 400 rather than the platform's usual 409 for a failed precondition: nothing another
    caller did made it fail, the caller skipped a step (Google's FAILED_PRECONDITION is a
    400 too)."""

    code = "run_not_deleted"
    http_status = 400

"""The files room's errors (the service's one HTTP boundary maps them)."""

from mldiag_platform.errors import InvalidArgument, NotFound, PayloadTooLarge


class JobNotFound(NotFound):
    """No custom job of that id under that parent."""

    code = "not_found"


class ReplicaNotFound(NotFound):
    """The job has no such replica (its pools do not have it)."""

    code = "replica_not_found"


class AttemptNotFound(NotFound):
    """The replica has not reached that attempt."""

    code = "attempt_not_found"


class InvalidReplica(InvalidArgument):
    """A replica name that is not ``workerpool{pool}-{index}``."""

    code = "invalid_replica"


class InvalidLogRange(InvalidArgument):
    """An offset, tail or stream choice that cannot be served."""

    code = "invalid_log_range"


class InvalidPackageName(InvalidArgument):
    """A package file name pip would not install, or one with a directory part."""

    code = "invalid_package_name"


class EmptyPackage(InvalidArgument):
    """An upload with no bytes."""

    code = "empty_package"


class PackageTooLarge(PayloadTooLarge):
    """An upload over the configured package limit."""

    code = "package_too_large"

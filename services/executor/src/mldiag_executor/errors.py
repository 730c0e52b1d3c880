"""The executor's errors."""

from mldiag_platform.errors import MldiagError


class SetupFailed(MldiagError):
    """An attempt could not get going: a package would not download or install, the
    interpreter is missing, the process would not spawn. Reported as
    ``ReplicaExited(reason="setup_failed")`` with ``message``; retrying the command would
    fail the same way."""

    code = "setup_failed"
    retryable = False


class Rejected(MldiagError):
    """The executor refuses the command (it names another executor, or asks for what this
    backend cannot give). Reported as ``ReplicaExited(reason="rejected")``."""

    code = "rejected"
    retryable = False

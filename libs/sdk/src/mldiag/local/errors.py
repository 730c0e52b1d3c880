"""Errors of the embedded stack. Each carries a stable ``code`` and a message meant for a person."""


class LocalStackError(Exception):
    """Base of every error the embedded stack raises; ``str(error)`` says what to do about it."""

    code = "local_stack_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BinaryNotFound(LocalStackError):
    """A server binary (nats-server, postgres) is missing or too old."""

    code = "binary_not_found"


class PortInUse(LocalStackError):
    """A port the stack needs is already taken by another program."""

    code = "port_in_use"


class AlreadyRunning(LocalStackError):
    """A server or stack is already running on this data directory or home."""

    code = "already_running"


class NotAccessible(LocalStackError):
    """A directory the unprivileged server user must enter is closed to it."""

    code = "not_accessible"


class StartupFailed(LocalStackError):
    """A component exited or did not become healthy in time."""

    code = "startup_failed"

"""The embedded default stack: private NATS and PostgreSQL servers and the supervisor behind
``mldiag up``, all without Docker and without touching other servers on the machine.

``EmbeddedNats`` and ``EmbeddedPostgres`` also serve tests as a fallback when no servers
are configured.
"""

from mldiag.local.errors import (
    AlreadyRunning,
    BinaryNotFound,
    LocalStackError,
    NotAccessible,
    PortInUse,
    StartupFailed,
)
from mldiag.local.nats import EmbeddedNats
from mldiag.local.postgres import EmbeddedPostgres

__all__ = [
    "AlreadyRunning",
    "BinaryNotFound",
    "EmbeddedNats",
    "EmbeddedPostgres",
    "LocalStackError",
    "NotAccessible",
    "PortInUse",
    "StartupFailed",
]

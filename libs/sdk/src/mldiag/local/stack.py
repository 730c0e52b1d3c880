"""The embedded default stack behind ``mldiag up``: NATS, PostgreSQL, local object storage,
the services (training and a local executor among them) and the edge on the API port (the one
base URL), as child processes of one supervisor, all in one home directory.

While the supervisor runs, ``<home>/state.json`` says where every component is (pids, URLs,
ports, logs); ``mldiag status`` and ``mldiag down`` work from that file alone. Printing is
left to the caller (the CLI): these modules report through callbacks and exceptions.

This module is the one import surface; the parts live in ``config`` (services, ports,
environment), ``state`` (the state file), ``supervisor`` (``up``, with ``restarts``, its
restart policy), ``detached`` (``up --detach``) and ``control`` (``status``, ``down``).
"""

from mldiag.local.config import (
    DEFAULT_HEALTH_TIMEOUT,
    DEFAULT_NATS_MONITOR_PORT,
    DEFAULT_NATS_PORT,
    DEFAULT_POSTGRES_PORT,
    SERVICE_NAMES,
    SERVICES,
    STATE_FILE,
    ServiceSpec,
    StackConfig,
    resolve_config,
    service_available,
    service_environment,
    service_spec,
)
from mldiag.local.control import (
    ComponentHealth,
    DownResult,
    StackReport,
    check_component,
    stack_status,
    stop_stack,
)
from mldiag.local.detached import start_detached
from mldiag.local.state import Component, StackState, read_state, write_state
from mldiag.local.supervisor import Supervisor, preflight

__all__ = [
    "DEFAULT_HEALTH_TIMEOUT",
    "DEFAULT_NATS_MONITOR_PORT",
    "DEFAULT_NATS_PORT",
    "DEFAULT_POSTGRES_PORT",
    "SERVICES",
    "SERVICE_NAMES",
    "STATE_FILE",
    "Component",
    "ComponentHealth",
    "DownResult",
    "ServiceSpec",
    "StackConfig",
    "StackReport",
    "StackState",
    "Supervisor",
    "check_component",
    "preflight",
    "read_state",
    "resolve_config",
    "service_available",
    "service_environment",
    "service_spec",
    "stack_status",
    "start_detached",
    "stop_stack",
    "write_state",
]

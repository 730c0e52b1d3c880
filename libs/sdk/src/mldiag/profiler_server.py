"""On-demand profiling: this process's ``jax.profiler`` server and the address it advertises.

``mldiag.init(profiler_port=P)`` (or ``MLDIAG_PROFILER_PORT``, or
``machinelearning_run(on_demand_xprof=True)``, port 9999 by default) starts
``jax.profiler.start_server(P)`` once per process and registers it as a profiler target of
the run, so ``mldiag profiles capture`` can trace the process from outside. Port 0 picks a
free port. The server listens on every interface without authentication (JAX's own): keep
the port inside the cluster's network.

The address registered is ``<advertised host>:<port>``; the advertised host is
``MLDIAG_PROFILER_ADVERTISE_HOST`` when set, else the local address this machine uses to
reach the registry (the platform connects back from there: 127.0.0.1 for a local one, the
host's or pod's IP for a remote one), else the host name when it resolves, else 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("mldiag")

DEFAULT_PROFILER_PORT = 9999
"""The official SDK's port for ``on_demand_xprof=True``."""

PORT_ENV = "MLDIAG_PROFILER_PORT"
"""Starts the profiler server on this port (0: a free one) when ``init`` names none."""

ADVERTISE_HOST_ENV = "MLDIAG_PROFILER_ADVERTISE_HOST"
"""The host (name or IP) the platform should connect to for this process's server."""

_lock = threading.Lock()
_server: Any = None
"""JAX's ``ProfilerServer``: its port is freed only when this object is garbage-collected."""
_server_port: int | None = None


def resolve_profiler_port(
    explicit: int | None, *, on_demand: bool = False, env: Mapping[str, str] | None = None
) -> int | None:
    """The port to serve on: ``explicit``, else ``MLDIAG_PROFILER_PORT``, else 9999 when
    ``on_demand``, else None (no server). ``ValueError`` for a port out of range."""
    env = os.environ if env is None else env
    port: int | None = explicit
    if port is None and (text := env.get(PORT_ENV, "").strip()):
        try:
            port = int(text)
        except ValueError:
            raise ValueError(f"{PORT_ENV} must be a port number, not {text!r}") from None
    if port is None and on_demand:
        port = DEFAULT_PROFILER_PORT
    if port is not None and not 0 <= port <= 65535:
        raise ValueError(f"profiler port must be between 0 and 65535, not {port}")
    return port


def start_profiler_server(port: int) -> int | None:
    """Start JAX's profiler server on ``port`` (0: a free port) unless this process has one
    already; the port it listens on, or None when it could not start (logged, not raised)."""
    global _server, _server_port  # one server per process, as JAX allows
    with _lock:
        if _server is not None:
            if port not in (0, _server_port):
                logger.warning(
                    "mldiag.profiler.server_exists port=%s asked=%d (JAX allows one per process)",
                    _server_port,
                    port,
                )
            return _server_port
        chosen = port or _free_port()
        if not _port_is_free(chosen):
            # JAX would log the bind failure and return a server that listens nowhere.
            logger.error("mldiag.profiler.port_busy port=%d (no on-demand profiling)", chosen)
            return None
        try:
            profiler = importlib.import_module("jax.profiler")
            try:
                # Without waiting for JAX's backends: initialising them here, before the
                # program's jax.distributed.initialize(), would break a multi-host job. A
                # capture sets up its tracers when it runs, once the backends exist.
                server = profiler.start_server(chosen, requires_backend=False)
            except TypeError:  # a JAX without requires_backend
                server = profiler.start_server(chosen)
        except Exception as error:  # noqa: BLE001  # no JAX, or JAX refused: log, go on
            logger.error(  # noqa: TRY400  # the message is the news
                "mldiag.profiler.server_failed port=%d error=%s: %s",
                chosen,
                type(error).__name__,
                error,
            )
            return None
        if not _listening(chosen):
            logger.error("mldiag.profiler.server_not_listening port=%d", chosen)
            return None
        _server, _server_port = server, chosen
        logger.info("mldiag.profiler.server_started port=%d", chosen)
        return chosen


def advertised_address(port: int, api_url: str, env: Mapping[str, str] | None = None) -> str:
    """``host:port`` for the profiler target (``[v6]:port`` for an IPv6 address)."""
    env = os.environ if env is None else env
    host = env.get(ADVERTISE_HOST_ENV, "").strip() or _route_address(api_url) or _own_name()
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]:{port}"
    return f"{host}:{port}"


def _route_address(api_url: str) -> str:
    """The local address of the route to the registry (a UDP connect sends nothing)."""
    host = urlsplit(api_url).hostname or "127.0.0.1"
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 80, proto=socket.IPPROTO_UDP)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            local = str(probe.getsockname()[0])
    except OSError:
        return ""
    return "" if local in ("0.0.0.0", "::") else local  # "no route"


def _own_name() -> str:
    name = socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return "127.0.0.1"
    return name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port: int = probe.getsockname()[1]
        return port


def _port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (JAX binds ``[::]``, both families)."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                # Lets the bind pass over connections closing on the port, never a listener.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                probe.bind((address, port))
                return True
        except OSError as error:
            if family == socket.AF_INET6 and error.errno != errno.EADDRINUSE:
                continue  # no IPv6 here: ask IPv4
            return False
    return False


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False

"""The supervisor behind ``mldiag up``: starts NATS, PostgreSQL, storage and the services
in order, watches them, and stops them in reverse order on SIGINT, SIGTERM or SIGHUP.

A component that exits on its own is started again after a backoff (``restarts``), while the
rest keeps running; the state file records its restarts. A service that crash-loops is given
up on (marked ``failed``) and the rest of the stack stays up; NATS or PostgreSQL crash-looping
stops the stack, since no service can work without them.
"""

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Protocol

import httpx

from mldiag.credentials import ensure_local_token
from mldiag.local.config import (
    SPECS,
    ServiceSpec,
    StackConfig,
    locked_down_substrate,
    probe_host,
    service_available,
    service_environment,
)
from mldiag.local.errors import AlreadyRunning, LocalStackError, StartupFailed
from mldiag.local.nats import EmbeddedNats
from mldiag.local.postgres import EmbeddedPostgres
from mldiag.local.process import (
    LOCALHOST,
    log_size,
    log_tail,
    process_start_ticks,
    require_free_ports,
    stop_process,
)
from mldiag.local.restarts import RestartPolicy, RestartTracker, describe_exit
from mldiag.local.state import (
    Component,
    StackState,
    alive_components,
    read_state,
    recorded_and_orphaned,
    supervisor_alive,
    write_state,
)

log = logging.getLogger(__name__)

SERVICE_STOP_TIMEOUT = 15.0
"""uvicorn drains for up to 10 s after SIGTERM; a little more before SIGKILL."""

_LOCK_FILE = "supervisor.lock"


@contextlib.contextmanager
def home_lock(home: Path) -> Iterator[None]:
    """Held by the supervisor for its whole life; the kernel drops it if the process dies."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / _LOCK_FILE).open("a") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            state = read_state(home)
            pid = f" (supervisor pid {state.supervisor_pid})" if state else ""
            raise AlreadyRunning(
                f"a stack from {home} is already running{pid}; "
                f"`mldiag status --home {home}` shows it, `mldiag down --home {home}` stops it"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


def preflight(config: StackConfig) -> None:
    """Refuse early, with a clear message, what would make ``up`` fail: a stack already
    running from this home, processes left by one that died, missing services, taken ports.
    """
    with home_lock(config.home):
        _preflight_locked(config)


def _preflight_locked(config: StackConfig) -> None:
    home = config.home
    state = read_state(home)
    leftovers = alive_components(recorded_and_orphaned(home, state))
    if leftovers or (state is not None and supervisor_alive(state)):
        pids = ", ".join(f"{c.name} {c.pid}" for c in leftovers)
        raise AlreadyRunning(
            f"processes of an earlier stack from {home} are still running ({pids}); "
            f"`mldiag down --home {home}` stops them"
        )
    config.state_file.unlink(missing_ok=True)  # stale, if any: its processes are all gone
    missing = [name for name in config.services if not service_available(SPECS[name])]
    if config.services_chosen and missing:
        modules = ", ".join(f"{name} (python -m {SPECS[name].module})" for name in missing)
        raise LocalStackError(f"not installed, so cannot start: {modules}")
    skipped = {SPECS[name].label for name in missing}
    ports = {label: port for label, port in config.ports().items() if label not in skipped}
    require_free_ports(
        ports,
        hint="Another program (or another mldiag stack) uses them: choose other ports with "
        "the --*-port flags or shift them all with --port-offset N.",
    )
    hosts = {config.service_hosts[name] for name in config.services} - {LOCALHOST}
    for host in hosts:
        require_free_ports(
            {
                SPECS[name].label: config.service_ports[name]
                for name in config.services
                if config.service_hosts[name] == host and name not in missing
            },
            host=host,
        )


class _StopRequested(Exception):
    """SIGINT or SIGTERM arrived; unwind to the shutdown."""


@dataclass
class _Restarts:
    """One component's restart bookkeeping (monotonic seconds)."""

    tracker: RestartTracker
    started_at: float
    due: float | None = None
    """When the pending restart is to happen; None when none is pending."""


@dataclass
class _Service:
    spec: ServiceSpec
    process: "subprocess.Popen[bytes]"
    component: Component
    health_url: str
    log_path: Path
    since: int
    restarts: _Restarts


class _Server(Protocol):
    """What the supervisor needs of :class:`EmbeddedNats` and :class:`EmbeddedPostgres`."""

    log_file: Path

    @property
    def pid(self) -> int | None: ...

    @property
    def running(self) -> bool: ...

    @property
    def exit_status(self) -> int | None: ...

    def start(self) -> None: ...

    def stop(self, timeout: float) -> None: ...


@dataclass
class _WatchedServer:
    server: _Server
    component: Component
    restarts: _Restarts


def _ignore(_message: str) -> None:
    return None


def format_progress(seconds: float, message: str) -> str:
    """A start-up stage as ``mldiag up`` prints it: the seconds since the start, then what."""
    return f"{seconds:5.1f}s  {message}"


class Supervisor:
    """Runs the stack in the foreground until SIGINT or SIGTERM, then stops it in order.

    ``notify`` receives one-line messages meant for a person (skips, restarts, the stop).
    ``progress`` receives the start-up's stages as they happen (NATS ready, PostgreSQL
    initialising on its first start, then ready, each service healthy), each with the
    seconds since the start; they are also kept in the state file's ``progress`` for
    ``mldiag up --detach`` to show. ``policy`` says when a component that exits on its own
    is restarted and when it is given up on.
    """

    def __init__(
        self,
        config: StackConfig,
        notify: Callable[[str], None] = _ignore,
        policy: RestartPolicy | None = None,
        progress: Callable[[str], None] = _ignore,
    ) -> None:
        self.config = config
        self.notify = notify
        self._progress_callback = progress
        self._started = time.monotonic()
        self.policy = policy or RestartPolicy()
        self.state: StackState | None = None
        self._nats: EmbeddedNats | None = None
        self._postgres: EmbeddedPostgres | None = None
        self._servers: list[_WatchedServer] = []
        self._services: list[_Service] = []
        self._env: dict[str, str] = {}
        self._credentials: Mapping[str, Mapping[str, str]] = {}
        self._stop_requested = False
        self._force = False

    def run(self, on_ready: Callable[[StackState], None] = lambda _state: None) -> int:
        """Start everything, call ``on_ready`` once all is healthy, run until asked to stop.

        Returns 0 after a requested stop, 1 if NATS or PostgreSQL crash-looped. Start-up
        failures raise :class:`~mldiag.local.errors.LocalStackError` after everything
        started so far has been stopped again.
        """
        config = self.config
        with home_lock(config.home):
            _preflight_locked(config)
            # SIGHUP too: a closed terminal must not orphan the servers.
            signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
            previous = {sig: signal.signal(sig, self._on_signal) for sig in signals}
            try:
                return self._run_locked(on_ready)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def _on_signal(self, _signum: int, _frame: FrameType | None) -> None:
        # Only flags: the loops check them between steps, so no step is cut in half.
        if self._stop_requested:
            self._force = True
        self._stop_requested = True

    def _check_stop(self) -> None:
        if self._stop_requested:
            raise _StopRequested

    def _run_locked(self, on_ready: Callable[[StackState], None]) -> int:
        config = self.config
        for directory in (
            config.logs_dir,
            config.storage_dir,
            config.xprof_dir,
            config.executor_dir,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        self.notify(f"starting the mldiag stack (home {config.home}) ...")
        started = self._started = time.monotonic()
        pid = os.getpid()
        self.state = StackState(
            home=str(config.home),
            supervisor_pid=pid,
            supervisor_start_ticks=process_start_ticks(pid),
            status="starting",
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        self._save()
        try:
            try:
                self._start_all()
            except _StopRequested:
                self.notify("stop requested during start-up; stopping")
                return 0
            self.state.status = "healthy"
            self.state.ready_seconds = round(time.monotonic() - started, 2)
            self._save()
            log.info(
                "local.stack.ready seconds=%.2f home=%s", self.state.ready_seconds, config.home
            )
            on_ready(self.state)
            return self._watch()
        finally:
            self._stop_all()
            config.state_file.unlink(missing_ok=True)

    def _save(self) -> None:
        if self.state is not None:
            write_state(self.config.home, self.state)

    def _progress(self, message: str) -> None:
        """One start-up stage: to the caller, and into the state file for a detached ``up``."""
        line = format_progress(time.monotonic() - self._started, message)
        self._current().progress.append(line)
        self._save()
        self._progress_callback(line)

    def _current(self) -> StackState:
        if self.state is None:
            raise RuntimeError("the supervisor has not started")
        return self.state

    def _record(self, component: Component) -> None:
        if component.pid is not None:
            component.start_ticks = process_start_ticks(component.pid)
        self._current().components.append(component)
        self._save()

    def _watch_server(self, server: _Server, component: Component) -> None:
        restarts = _Restarts(RestartTracker(self.policy), started_at=time.monotonic())
        self._servers.append(_WatchedServer(server, component, restarts))

    def _start_all(self) -> None:
        config = self.config
        logs = config.logs_dir
        # Locked down by default: a NATS user and a PostgreSQL role per service.
        substrate = locked_down_substrate(config)
        self._credentials = substrate.credentials
        nats = self._nats = EmbeddedNats(
            config.home / "nats",
            config.nats_port,
            config.nats_monitor_port,
            logs / "nats.log",
            authorization=substrate.nats_authorization,
        )
        nats.start()
        self._progress(f"NATS ready on {nats.url}")
        self._record(
            Component(
                name="nats",
                kind="nats",
                label="NATS",
                url=nats.url,
                port=nats.port,
                pid=nats.pid,
                log=str(nats.log_file),
                health_url=nats.health_url,
                detail=f"monitoring {nats.monitor_url}",
            )
        )
        self._watch_server(nats, self._current().components[-1])
        self._check_stop()
        postgres = self._postgres = EmbeddedPostgres(
            config.home / "postgres",
            config.postgres_port,
            logs / "postgres.log",
            password=substrate.postgres_password,
            setup_sql=substrate.postgres_setup_sql,
        )
        if not (postgres.data_dir / "PG_VERSION").exists():
            self._progress(f"PostgreSQL: first start, initialising {postgres.data_dir} ...")
        postgres.start()
        self._progress(f"PostgreSQL ready on port {postgres.port}")
        self._record(
            Component(
                name="postgres",
                kind="postgres",
                label="PostgreSQL",
                url=postgres.url,
                port=postgres.port,
                pid=postgres.pid,
                log=str(postgres.log_file),
                detail=f"data {postgres.data_dir}",
            )
        )
        self._watch_server(postgres, self._current().components[-1])
        self._record(
            Component(
                name="storage",
                kind="storage",
                label="storage",
                url=config.storage_url,
                detail=f"xprof work dir {config.xprof_dir}",
            )
        )
        self._check_stop()
        env = service_environment(config, nats.url, postgres.url)
        env["MLDIAG_RUN_REGISTRY_BOOTSTRAP_ADMIN_TOKEN"] = ensure_local_token(config.home)
        self._env = env
        self._start_services()
        self._wait_services_healthy()

    def _spawn(self, spec: ServiceSpec, log_path: Path) -> "subprocess.Popen[bytes]":
        with log_path.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", spec.module],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**self._env, **self._credentials.get(spec.name, {})},
                start_new_session=True,
            )

    def _start_services(self) -> None:
        for name in self.config.services:
            spec = SPECS[name]
            if not service_available(spec):
                self._current().skipped.append(name)
                self.notify(f"skipping {name}: not installed (no module {spec.module}.__main__)")
                continue
            host = self.config.service_hosts[name]
            port = self.config.service_ports[name]
            log_path = self.config.logs_dir / f"{name}.log"
            since = log_size(log_path)
            process = self._spawn(spec, log_path)
            restarts = _Restarts(RestartTracker(self.policy), started_at=time.monotonic())
            base = f"http://{probe_host(host)}:{port}"
            health_url = f"{base}{spec.health_path}"
            component = Component(
                name=name,
                kind="service",
                label=spec.label,
                url=base,
                port=port,
                pid=process.pid,
                log=str(log_path),
                health_url=health_url,
                detail=None if host == LOCALHOST else f"listening on {host}",
            )
            self._services.append(
                _Service(spec, process, component, health_url, log_path, since, restarts)
            )
            self._record(component)
            log.info("local.service.spawned service=%s pid=%d port=%d", name, process.pid, port)

    def _wait_services_healthy(self) -> None:
        pending = {service.spec.name: service for service in self._services}
        last_answer = dict.fromkeys(pending, "no answer yet")
        deadline = time.monotonic() + self.config.health_timeout
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            while pending:
                self._check_stop()
                for name, service in list(pending.items()):
                    if service.process.poll() is not None:
                        raise StartupFailed(
                            f"{name} exited with status {service.process.returncode} during "
                            f"start-up; {service.log_path} ends with:\n"
                            f"{log_tail(service.log_path, since=service.since)}"
                        )
                    try:
                        response = client.get(service.health_url)
                    except httpx.HTTPError as error:
                        last_answer[name] = type(error).__name__
                        continue
                    if response.status_code == 200:
                        del pending[name]
                        log.info("local.service.healthy service=%s", name)
                        self._progress(f"{service.spec.label} healthy on {service.component.url}")
                    else:
                        last_answer[name] = f"{response.status_code} {response.text[:200]}"
                if pending and time.monotonic() > deadline:
                    details = "\n\n".join(
                        f"{name}: last answer {last_answer[name]}; {service.log_path} ends "
                        f"with:\n{log_tail(service.log_path, since=service.since)}"
                        for name, service in pending.items()
                    )
                    raise StartupFailed(
                        f"not healthy after {self.config.health_timeout:.0f}s: "
                        f"{', '.join(pending)}\n\n{details}"
                    )
                if pending:
                    time.sleep(0.1)

    def _watch(self) -> int:
        # One thread does it all, and only between steps checks for a stop: a restart is
        # either not begun or complete (and recorded) when the shutdown starts.
        with httpx.Client(trust_env=False, timeout=0.5) as client:
            while not self._stop_requested:
                time.sleep(0.2)
                for watched in self._servers:
                    if not self._look_after_server(watched):
                        return 1
                for service in self._services:
                    self._look_after_service(service, client)
        return 0

    def _look_after_service(self, service: _Service, client: httpx.Client) -> None:
        component, restarts = service.component, service.restarts
        if component.state == "failed" or self._stop_requested:
            return
        if restarts.due is not None:
            if time.monotonic() >= restarts.due:
                self._restart_service(service)
        elif service.process.poll() is not None:
            # Whatever it left in its process group goes too: it may hold its port.
            stop_process(service.process, signal.SIGKILL, timeout=0.0)
            status = service.process.returncode
            tail = log_tail(service.log_path, lines=10, since=service.since)
            if not self._on_exit(component, restarts, status, service.log_path, tail):
                self.notify(
                    f"the rest of the stack keeps running without {component.name}; "
                    f"`mldiag down` and `mldiag up` try it again"
                )
        elif component.state == "restarting" and _answers_ok(client, service.health_url):
            component.state = "running"
            self._save()
            log.info(
                "local.component.recovered component=%s pid=%s restarts=%d",
                component.name,
                component.pid,
                component.restarts,
            )
            self.notify(f"{component.name} is healthy again (pid {component.pid})")

    def _restart_service(self, service: _Service) -> None:
        service.restarts.due = None
        service.since = log_size(service.log_path)
        service.process = self._spawn(service.spec, service.log_path)
        service.restarts.started_at = time.monotonic()
        self._note_restart(service.component, service.process.pid)

    def _look_after_server(self, watched: _WatchedServer) -> bool:
        """Restart NATS or PostgreSQL if it exited; False when it crash-loops."""
        server, component, restarts = watched.server, watched.component, watched.restarts
        if self._stop_requested:
            return True
        if restarts.due is not None:
            if time.monotonic() < restarts.due:
                return True
            restarts.due = None
            try:
                server.start()  # returns once it is healthy again
            except LocalStackError as error:
                log.warning(
                    "local.component.restart_failed component=%s error=%s", component.name, error
                )
                self._note_restart(component, None)
                return self._server_exited(watched, None, str(error))
            restarts.started_at = time.monotonic()
            self._note_restart(component, server.pid)
            component.state = "running"
            self._save()
            self.notify(f"{component.label} is healthy again (pid {component.pid})")
            return True
        if not server.running:
            status = server.exit_status
            server.stop(timeout=5.0)  # reaps it and whatever its group left
            return self._server_exited(watched, status, log_tail(server.log_file, lines=10))
        return True

    def _server_exited(self, watched: _WatchedServer, status: int | None, tail: str) -> bool:
        component = watched.component
        if self._on_exit(component, watched.restarts, status, watched.server.log_file, tail):
            return True
        self.notify(f"no service works without {component.label}; stopping the stack")
        return False

    def _on_exit(
        self,
        component: Component,
        restarts: _Restarts,
        status: int | None,
        log_path: Path,
        tail: str,
    ) -> bool:
        """Record an unrequested exit and schedule the restart; False on a crash loop."""
        now = time.monotonic()
        decision = restarts.tracker.on_exit(now, restarts.started_at)
        component.last_exit_status = status
        how = describe_exit(status)
        if decision.give_up:
            component.state = "failed"
            self._save()
            log.error(
                "local.component.crash_loop component=%s crashes=%d window_seconds=%.0f "
                "last_exit=%r",
                component.name,
                decision.crashes_in_window,
                self.policy.window,
                how,
            )
            self.notify(
                f"{component.name} crashed {decision.crashes_in_window} times within "
                f"{self.policy.window:.0f}s (last: {how}); giving up on it. "
                f"{log_path} ends with:\n{tail}"
            )
            return False
        component.state = "restarting"
        restarts.due = now + decision.delay
        self._save()
        log.warning(
            "local.component.exited component=%s last_exit=%r restart_in_seconds=%.1f",
            component.name,
            how,
            decision.delay,
        )
        self.notify(
            f"{component.name} exited ({how}); restarting it in {decision.delay:g}s. "
            f"{log_path} ends with:\n{tail}"
        )
        return True

    def _note_restart(self, component: Component, pid: int | None) -> None:
        component.pid = pid
        component.start_ticks = process_start_ticks(pid) if pid is not None else None
        component.restarts += 1
        component.last_restart_at = datetime.now(UTC).isoformat(timespec="seconds")
        component.state = "restarting"
        self._save()
        log.info(
            "local.component.restarted component=%s pid=%s restarts=%d",
            component.name,
            pid,
            component.restarts,
        )

    def _stop_all(self) -> None:
        if self.state is not None and self.config.state_file.exists():
            self.state.status = "stopping"
            self._save()
        running = [s for s in self._services if s.process.poll() is None]
        if running:
            self.notify(f"stopping {', '.join(s.spec.name for s in running)}")
        for service in running:
            with contextlib.suppress(ProcessLookupError):
                service.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + SERVICE_STOP_TIMEOUT
        while any(s.process.poll() is None for s in running):
            if self._force or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for service in running:
            # Graceful exits are reaped at once; survivors get SIGKILL on their group.
            status = stop_process(service.process, signal.SIGKILL, timeout=5.0)
            log.info("local.service.stopped service=%s status=%d", service.spec.name, status)
        self._services.clear()
        quick = 1.0 if self._force else None
        if self._postgres is not None:
            self.notify("stopping PostgreSQL")
            self._postgres.stop(timeout=quick or 15.0)
        if self._nats is not None:
            self.notify("stopping NATS")
            self._nats.stop(timeout=quick or 10.0)


def _answers_ok(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).status_code == 200
    except httpx.HTTPError:
        return False

"""Programmatic profiles: ``mldiag.xprof()`` around ``jax.profiler.start_trace/stop_trace``.

The official SDK's names and forms::

    prof = mldiag.xprof()          # on the current run, every process
    prof.start()
    train_steps()
    prof.stop()

    with mldiag.xprof(process_index_list=[0]):   # only process 0 traces
        train_steps()

    @mldiag.xprof()
    def train_steps() -> None: ...

Each trace is a named session (never JAX's per-second default, where two traces in the same
second overwrite each other): ``session_id``, else ``trace-YYYYMMDD-HHMMSS-<6 hex>``. On
several JAX processes every process takes part in choosing it: process 0 makes the id and
broadcasts it (a collective), so every process must call ``start`` at the same point of the
program, including those that ``process_index_list`` leaves out; they then trace nothing.

JAX traces into a local temporary directory; a background thread uploads its
``<host>.xplane.pb`` to ``<artifacts root>/<run>/plugins/profile/<session>/<host>.xplane.pb``
(``host``: the SDK's host name, ``MLDIAG_HOST``) and reports the session to the
run-registry: ACTIVE at start, then SUCCEEDED or FAILED. Upload and report failures are
logged, never raised; using the profiler wrongly (``stop`` without ``start``, two traces at
once) raises :class:`XProfError`. JAX is imported at ``start``, never before.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from mldiag.config import Mode
from mldiag.profiling import FinishedTrace, RunProfiles, TracerLevels
from mldiag.run import Run, current_run

logger = logging.getLogger("mldiag")

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""A session id names a directory: letters, digits, ``.``, ``_``, ``-``; at most 128
(``mldiag_schemas.profiling.SESSION_ID_PATTERN``)."""

SESSION_ID_BYTES = 128
"""Size of the array the session id travels in between JAX processes (the longest id)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")

_active_lock = threading.Lock()
_active: XProf | None = None
"""The trace this process is running: JAX allows one at a time."""
_traced: set[tuple[str, str]] = set()
"""(run, session) pairs this process has traced: a session holds one trace per host."""
_warned_device_level = False


class XProfError(RuntimeError):
    """The profiler was used wrongly: ``stop`` without ``start``, ``start`` twice, two traces
    at once, or no run to profile."""


def xprof(
    run: Run | None = None,
    process_index_list: Iterable[int] | None = None,
    *,
    session_id: str | None = None,
    host_tracer_level: int = 2,
    device_tracer_level: int = 1,
    python_tracer_level: int = 0,
) -> XProf:
    """A profiler of ``run`` (default: the current run when the trace starts).

    Use ``start()``/``stop()``, a ``with`` block, or decorate a function (each call is one
    trace). ``process_index_list`` limits the processes that trace (None: all).
    ``session_id`` names every trace of this profiler (default: a new generated id per
    trace; ``start(session_id)`` names one). Tracer levels are ``jax.profiler``'s: host 0-3,
    device 0-1, python 0-1 (python tracing makes traces much larger and slower to stop).
    """
    return XProf(
        run,
        process_index_list,
        session_id=session_id,
        tracer_levels=TracerLevels(host_tracer_level, device_tracer_level, python_tracer_level),
    )


def new_session_id(now: datetime | None = None) -> str:
    """``trace-YYYYMMDD-HHMMSS-<6 hex>`` (UTC): unique even for traces in the same second."""
    moment = now or datetime.now(UTC)
    return f"trace-{moment.astimezone(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def check_session_id(session_id: str) -> str:
    """``session_id`` when it can name a session directory, else ``ValueError``."""
    if not SESSION_ID_PATTERN.match(session_id):
        raise ValueError(
            f"invalid session id {session_id!r}: letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 128"
        )
    return session_id


def encode_session_id(session_id: str) -> Any:
    """The id as a fixed-size int32 array (zero-padded), the same shape on every process."""
    np = importlib.import_module("numpy")
    data = session_id.encode("ascii").ljust(SESSION_ID_BYTES, b"\0")
    return np.frombuffer(data, dtype=np.uint8).astype(np.int32)


def decode_session_id(array: Any) -> str:
    """The id :func:`encode_session_id` encoded."""
    np = importlib.import_module("numpy")
    return bytes(np.asarray(array).astype(np.uint8).tolist()).rstrip(b"\0").decode("ascii")


def shared_session_id(jax: Any) -> str:
    """A new session id, the same on every JAX process: process 0 makes it, the others get
    it through ``broadcast_one_to_all`` (a collective: every process must call this)."""
    if jax.process_count() == 1:
        return new_session_id()
    multihost = importlib.import_module("jax.experimental.multihost_utils")
    mine = new_session_id() if jax.process_index() == 0 else ""
    return decode_session_id(multihost.broadcast_one_to_all(encode_session_id(mine)))


def _forget_failed_trace() -> None:
    """Clear JAX's record of a trace whose stop failed.

    An on-demand capture running when the trace started makes ``stop_trace`` fail
    (``ALREADY_EXISTS: Another profiling session active``) before JAX forgets the trace, and
    every later ``start_trace`` of the process would then be refused. JAX has no public way
    out, so this uses its private state where it exists (checked with jax 0.10).
    """
    state = getattr(importlib.import_module("jax._src.profiler"), "_profile_state", None)
    reset = getattr(state, "reset", None)
    if callable(reset):
        try:
            reset()
        except Exception:  # a JAX whose internals moved: the next start says what is wrong
            logger.debug("mldiag.xprof.reset_failed", exc_info=True)


class XProf:
    """Traces of one run with ``jax.profiler``; create it with :func:`xprof`."""

    def __init__(
        self,
        run: Run | None = None,
        process_index_list: Iterable[int] | None = None,
        *,
        session_id: str | None = None,
        tracer_levels: TracerLevels | None = None,
    ) -> None:
        levels = tracer_levels or TracerLevels()
        for name, value, highest in (
            ("host_tracer_level", levels.host, 3),
            ("device_tracer_level", levels.device, 1),
            ("python_tracer_level", levels.python, 1),
        ):
            if not 0 <= value <= highest:
                raise ValueError(f"{name} must be between 0 and {highest}, not {value}")
        self._run = run
        self._process_indexes = None if process_index_list is None else set(process_index_list)
        self._fixed_session_id = None if session_id is None else check_session_id(session_id)
        self.tracer_levels = levels
        """The tracer levels asked for."""
        # Re-entrant: a run finishing from a SIGTERM handler stops the trace it interrupted.
        self._lock = threading.RLock()
        self._started = False
        self._tracing = False  # False on a process left out: it only took part in the id
        self._session_id: str | None = None
        self._log_dir: Path | None = None
        self._start_time: datetime | None = None
        self._effective_levels = levels
        self._profiles: RunProfiles | None = None

    @property
    def session_id(self) -> str | None:
        """The session of the trace running, or of the last one (None before any)."""
        return self._session_id

    @property
    def active(self) -> bool:
        """Whether ``start`` was called and ``stop`` not yet."""
        return self._started

    def start(self, session_id: str | None = None) -> str:
        """Start a trace; the session id it records into.

        Raises :class:`XProfError` when this profiler is started already, when another trace
        runs in this process (JAX allows one at a time), or when there is no run; and
        ``ValueError`` for a session id that cannot name a directory.
        """
        with self._lock:
            if self._started:
                raise XProfError(f"this profiler is already tracing session {self._session_id}")
            run = self._run or current_run()
            if run is None:
                raise XProfError(
                    "no run to profile: call mldiag.init() (or machinelearning_run()) first, "
                    "or pass run= to mldiag.xprof()"
                )
            chosen = session_id or self._fixed_session_id
            if run.mode is Mode.DISABLED:
                # MLDIAG_MODE=disabled makes every call a no-op: not even JAX is touched
                session = check_session_id(chosen) if chosen else new_session_id()
                self._started, self._tracing, self._session_id = True, False, session
                return session
            jax = importlib.import_module("jax")
            session = check_session_id(chosen) if chosen else shared_session_id(jax)
            index = jax.process_index() if jax.process_count() > 1 else run.process_index
            if self._process_indexes is not None and index not in self._process_indexes:
                self._started, self._tracing, self._session_id = True, False, session
                return session
            profiles = run._profiling()  # the SDK's own class
            self._begin(jax, session, profiles)
            self._started, self._tracing, self._session_id = True, True, session
            self._profiles = profiles
            profiles.set_active_trace(self.stop)
            assert self._start_time is not None  # noqa: S101  # set by _begin
            profiles.trace_started(session, self._start_time, self._effective_levels)
            return session

    def _begin(self, jax: Any, session: str, profiles: RunProfiles) -> None:
        global _active  # noqa: PLW0603  # JAX's one trace per process, mirrored here
        with _active_lock:
            if _active is not None:
                raise XProfError(
                    f"a trace is already running in this process (session "
                    f"{_active.session_id}): JAX allows one at a time; stop it first"
                )
            if (profiles.run_id, session) in _traced:
                raise XProfError(
                    f"session {session} was traced by this process already: a session holds"
                    " one trace per host, so give each trace its own session id (or none)"
                )
            options = self._options(jax, session)
            log_dir = Path(tempfile.mkdtemp(prefix=f"mldiag-xprof-{session}-"))
            try:
                jax.profiler.start_trace(str(log_dir), profiler_options=options)
            except RuntimeError as error:
                shutil.rmtree(log_dir, ignore_errors=True)
                raise XProfError(
                    f"JAX refused to start a trace ({error}); is a jax.profiler trace "
                    "running outside mldiag?"
                ) from error
            _active = self
            _traced.add((profiles.run_id, session))
        self._log_dir = log_dir
        self._start_time = datetime.now(UTC)
        logger.info(
            "mldiag.xprof.started run=%s session=%s dir=%s", profiles.run_id, session, log_dir
        )

    def _options(self, jax: Any, session: str) -> Any:
        """``ProfileOptions`` with the session id and tracer levels (never JAX's defaults:
        its python tracer is on by default)."""
        global _warned_device_level  # noqa: PLW0603  # warn once per process
        options = jax.profiler.ProfileOptions()
        options.session_id = session
        options.host_tracer_level = self.tracer_levels.host
        options.python_tracer_level = self.tracer_levels.python
        device = self.tracer_levels.device
        if hasattr(options, "device_tracer_level"):
            options.device_tracer_level = device
        else:
            # jax.profiler.ProfileOptions has no device level (0.10): JAX traces devices.
            if device != 1 and not _warned_device_level:
                _warned_device_level = True
                logger.warning("mldiag.xprof.device_tracer_level_unsupported (device tracing on)")
            device = 1
        self._effective_levels = TracerLevels(
            self.tracer_levels.host, device, self.tracer_levels.python
        )
        return options

    def stop(self) -> None:
        """Stop the trace and hand it to the upload thread (JAX writes the trace here, which
        takes a while for long traces). Raises :class:`XProfError` when not started."""
        global _active  # noqa: PLW0603  # JAX's one trace per process, mirrored here
        with self._lock:
            if not self._started:
                raise XProfError("stop() without start(): this profiler is not tracing")
            self._started = False
            if not self._tracing:
                return
            self._tracing = False
            profiles, self._profiles = self._profiles, None
            assert profiles is not None  # noqa: S101  # set with _tracing
            assert self._session_id is not None  # noqa: S101
            assert self._log_dir is not None  # noqa: S101
            assert self._start_time is not None  # noqa: S101
            profiles.set_active_trace(None)
            jax = importlib.import_module("jax")
            error = ""
            try:
                jax.profiler.stop_trace()
            except Exception as failure:  # noqa: BLE001  # reported FAILED, never raised
                error = f"JAX could not stop the trace: {type(failure).__name__}: {failure}"
                _forget_failed_trace()
            finally:
                with _active_lock:
                    if _active is self:
                        _active = None
            trace = FinishedTrace(
                session_id=self._session_id,
                log_dir=self._log_dir,
                start_time=self._start_time,
                end_time=datetime.now(UTC),
                tracer_levels=self._effective_levels,
                error=error,
            )
            profiles.trace_finished(trace)
            logger.info("mldiag.xprof.stopped run=%s session=%s", profiles.run_id, trace.session_id)

    def __enter__(self) -> Self:
        """Start a trace; the profiler itself (``with mldiag.xprof() as prof``)."""
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the trace, whether or not the block raised (its profile is often the one
        worth seeing)."""
        self.stop()

    def __call__(self, function: Callable[_P, _R]) -> Callable[_P, _R]:
        """Decorate ``function``: each call is traced as one session."""

        @functools.wraps(function)
        def traced(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with self:
                return function(*args, **kwargs)

        return traced

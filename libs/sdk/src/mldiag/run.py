"""A run as the training program sees it: ``init``, ``log``, ``finish``, and exit handling.

``log`` only appends to an in-memory buffer; everything else (conversion, batching, disk,
network) happens on the SDK's threads (see :mod:`mldiag.pipeline`). Buffer policy: about
``max_buffered_points`` points wait in memory (twice that at the very most); a ``log`` call
that finds the buffer full spills a batch to the disk spool in the caller's thread instead of
dropping points (a rare cost that only a producer outrunning the encoder can trigger).
Without a writable spool directory, batches wait in a bounded memory queue that drops its
oldest when full.

Only process 0 creates the run and changes its phase; every process records, each series
tagged with its host. At exit the run is marked COMPLETED, or FAILED on an uncaught exception
or a SIGTERM (any handler installed before keeps being called); both are also reported to
ingestion as lifecycle signals (:meth:`Run.report_signal`) for the event detector.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from types import FrameType, TracebackType
from typing import Any, Literal, Self

from mldiag.config import Mode, Settings, contention_interval, env_seconds, resolve_mode
from mldiag.control import ControlStatus, HttpRunControl, RunControl, RunPhase, RunSpec
from mldiag.encoding import Encoder
from mldiag.environment import user_configs, with_environment
from mldiag.heartbeat import Heartbeat
from mldiag.identity import host_name, process_index, resolve_run_id
from mldiag.jax_compile import CompileWatcher
from mldiag.offline import OfflinePipeline, OfflineRecord
from mldiag.pipeline import Pipeline
from mldiag.profiler_server import (
    advertised_address,
    resolve_profiler_port,
    start_profiler_server,
)
from mldiag.profiling import RunProfiles
from mldiag.signals import (
    DEFAULT_SIGNAL_TIMEOUT,
    MAX_EXCEPTION_CHARS,
    Signal,
    SignalKind,
    SignalSender,
)
from mldiag.spool import (
    BatchQueue,
    MemoryQueue,
    Spool,
    SpoolError,
    default_root,
    orphan_spools,
    writer_name,
)
from mldiag.system import Sample, SystemSampler, by_labels, contention_source
from mldiag.transport import MetricsWriter, client

logger = logging.getLogger("mldiag")

Status = Literal["COMPLETED", "FAILED"] | RunPhase
"""How a run ended: ``"COMPLETED"`` or ``"FAILED"`` (or the :class:`RunPhase`)."""

_SignalHandler = Callable[[int, FrameType | None], Any] | int | None

DATA_WAIT_TIME = "data_wait_time"
"""Seconds of a step spent waiting for input (:meth:`Run.data_wait`)."""
CHECKPOINT_TIME = "checkpoint_time"
"""Seconds a checkpoint save blocked training (:meth:`Run.checkpoint`)."""
COMPILE_TIME = "compile_time"
"""Seconds one XLA compilation took, one point per compilation (:meth:`Run.watch_jax`)."""

_current: Run | None = None
_current_lock = threading.Lock()


def current_run() -> Run | None:
    """The run started last by :func:`init` in this process and not finished yet."""
    return _current


class NoActiveRunError(RuntimeError):
    """A module-level call (``mldiag.log``) found no run: :func:`init` was not called, or
    the run it returned has finished. Its stable code is ``no_active_run``."""

    code = "no_active_run"

    def __init__(self, call: str) -> None:
        super().__init__(
            f"no_active_run: mldiag.{call}() has no active run: call mldiag.init() first"
        )


def active_run(call: str = "current_run") -> Run:
    """The current run (:func:`current_run`); :class:`NoActiveRunError` when there is none."""
    run = _current
    if run is None:
        raise NoActiveRunError(call)
    return run


def log(
    metrics: Mapping[str, Any],
    step: int | None = None,
    *,
    labels: Mapping[str, str] | None = None,
) -> None:
    """:meth:`Run.log` on the current run (W&B's ``wandb.log``): ``mldiag.log({"loss": x})``.

    Raises :class:`NoActiveRunError` before :func:`init` or after :func:`finish`.
    """
    active_run("log").log(metrics, step, labels=labels)


def finish(
    status: Status = "COMPLETED",
    error: str | None = None,
    timeout: float | None = None,
    *,
    error_code: str | None = None,
) -> bool:
    """:meth:`Run.finish` on the current run; without one, nothing to do (True), so that
    cleanup code may call it whatever happened before."""
    run = _current
    if run is None:
        return True
    return run.finish(status, error, timeout, error_code=error_code)


class Run:
    """One process's handle on a run. Create it with :func:`init`."""

    def __init__(
        self,
        spec: RunSpec,
        settings: Settings,
        *,
        process_index: int,
        host: str,
        control: RunControl | None,
        handle_exit: bool = True,
        replay_all: bool = True,
        system_metrics_interval: float | None = None,
        offline: OfflineRecord | None = None,
    ) -> None:
        self.spec = spec
        self.settings = settings
        self.process_index = process_index
        self.host = host
        self._control = control if process_index == 0 else None
        self._next_step = 0
        self._finished = False
        self._finish_lock = threading.RLock()  # re-entrant: SIGTERM may land inside finish
        self._disabled = False  # a forked child: it reports nothing either
        self._exit_error: str | None = None
        self._exit_code: str | None = None
        """The exception type or signal name that will end the run (its ``errorDetails.code``)."""
        self._pending_wait = 0.0
        """Seconds of :meth:`data_wait` not yet recorded (recorded at the next step)."""
        self._run_ready = self._control is None
        self._described: RunSpec | None = None
        """The spec with the environment's configs, once the sender thread collected them."""
        self._offline = offline
        """Where an offline run records everything it would send (None: online)."""
        self._http = client(settings.token, settings.request_timeout)
        self._pipeline: Pipeline | OfflinePipeline
        if offline is not None:
            self._pipeline = OfflinePipeline(
                settings, offline, Encoder(host, process_index), on_start=self._describe_offline
            )
        else:
            queue, orphans = self._open_spool(replay_all)
            dead_letters = settings.spool_dir / "dead-letter" if settings.spool_dir else None
            self._pipeline = Pipeline(
                settings,
                queue,
                MetricsWriter(self._http, settings.ingestion_url),
                Encoder(host, process_index),
                orphans=orphans,
                dead_letter_dir=dead_letters,
                before_send=self._ensure_run if self._control is not None else None,
            )
        self._pipeline.start()
        self._sampler: SystemSampler | None = None
        if system_metrics_interval is not None and os.environ.get("LOCAL_RANK", "0") == "0":
            self._sampler = SystemSampler(
                self._record_system,
                system_metrics_interval,
                fast_sources=(contention_source,),  # this process's tree is the run's
                fast_interval=contention_interval(),
            )
            self._sampler.start()
        self._heartbeat: Heartbeat | None = None
        if settings.heartbeat_interval > 0 and offline is None:  # liveness is for live runs
            self._heartbeat = Heartbeat(
                client(settings.token, settings.request_timeout),
                settings.ingestion_url,
                spec.run_id,
                host=host,
                process_index=process_index,
                interval=settings.heartbeat_interval,
                last_step=self._last_step,
            )
            self._heartbeat.start()
        self._signals = SignalSender(settings.ingestion_url, spec.run_id, settings.token)
        self._profiles: RunProfiles | None = None
        self._profiles_lock = threading.Lock()
        self._compiles = CompileWatcher(self._record_compile)
        self._compiles.start()  # only when the program has imported JAX already
        self._previous_excepthook: Callable[..., Any] | None = None
        self._previous_sigterm: _SignalHandler = None
        if handle_exit:
            self._install_exit_hooks()
        # A forked child (a data-loader worker) shares the spool files and the run but not
        # the threads: it must neither write nor end the run.
        reference = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _disable_in_child(reference))

    # -- identity ----------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id (the last segment of its resource name)."""
        return self.spec.run_id

    @property
    def name(self) -> str:
        """The run's display name."""
        return self.spec.display_name

    @property
    def is_primary(self) -> bool:
        """Whether this process (index 0) is the one that changes the run."""
        return self.process_index == 0

    @property
    def mode(self) -> Mode:
        """How this run records: online, offline (spooled for ``mldiag sync``) or disabled."""
        return Mode.ONLINE if self._offline is None else Mode.OFFLINE

    @property
    def step(self) -> int:
        """The step the next ``log`` without ``step`` will use."""
        return self._next_step

    # -- recording ---------------------------------------------------------------------

    def log(
        self,
        metrics: Mapping[str, Any],
        step: int | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Record ``metrics`` (name → number, numpy/JAX scalar or array) at ``step``.

        Without ``step``, the step after the last one logged is used (0 first). Never does
        I/O, never waits for a device and never raises for telemetry reasons: arrays are kept
        as references and converted on the SDK's thread. Any number of threads may call it
        at once without a lock; threads that leave ``step`` out share the run's one counter,
        each call taking a step of its own.
        """
        if self._finished:
            return
        try:
            values = dict(metrics)  # a copy: callers often reuse and mutate their dict
        except (TypeError, ValueError):
            logger.warning("mldiag.log.bad_metrics type=%s (call dropped)", type(metrics))
            return
        if step is None:
            # Read and advanced with no call in between, where the interpreter could switch
            # threads: two threads never take the same step, and the counter never goes back.
            step = self._next_step
            self._next_step = step + 1
        else:
            if type(step) is not int:
                try:
                    step = int(step)
                except (TypeError, ValueError):
                    logger.warning("mldiag.log.bad_step step=%r (call dropped)", step)
                    return
            if step < 0:
                logger.warning("mldiag.log.bad_step step=%d (call dropped)", step)
                return
            self._next_step = step + 1
        if self._pending_wait:
            self._record_wait(step)
        self._pipeline.put(step, values, labels)

    def record(
        self,
        metric_name: str,
        value: Any,
        step: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Record one value; without ``step``, at the current step (the last one logged).

        Unlike :meth:`log`, this does not advance the step: several metrics recorded one
        by one belong to the same step.
        """
        if self._finished:
            return
        if step is None:
            step = max(self._next_step - 1, 0)
        elif int(step) >= self._next_step:  # a new step
            self._next_step = int(step) + 1
            if self._pending_wait:
                self._record_wait(int(step))
        self._pipeline.put(int(step), {metric_name: value}, labels)

    # -- framework marks -----------------------------------------------------------------

    @contextlib.contextmanager
    def data_wait(self) -> Iterator[None]:
        """Time spent waiting for input, e.g. ``with run.data_wait(): batch = next(it)``.

        Waits add up until the next step is logged (``log``, or ``record`` with a new step)
        and are recorded as ``data_wait_time`` at that step: the wait before step k feeds
        step k. A wait left when the run finishes is recorded at the last step logged.
        Costs two clock reads; time the thread that trains, not the loader's threads.
        """
        began = time.perf_counter()
        try:
            yield
        finally:
            self._pending_wait += time.perf_counter() - began

    @contextlib.contextmanager
    def checkpoint(self) -> Iterator[None]:
        """Time a checkpoint save blocked training, e.g. ``with run.checkpoint(): save()``.

        Recorded as ``checkpoint_time`` (seconds) at the current step (the last one logged)
        when the block ends, even if it raises. For an asynchronous save, wrap only the part
        that blocks.
        """
        began = time.perf_counter()
        try:
            yield
        finally:
            self.record(CHECKPOINT_TIME, time.perf_counter() - began)

    def watch_jax(self) -> bool:
        """Record ``compile_time`` for every JAX compilation from now on; True when watching.

        ``init`` does this by itself when the program has imported JAX before it; call it
        when JAX is imported later (it imports ``jax.monitoring``, which does not start JAX's
        backends). The listener runs in the compiling thread and only records a point.
        """
        return self._compiles.start(import_jax=True)

    def _record_compile(self, seconds: float) -> None:
        self.record(COMPILE_TIME, seconds)

    def _record_wait(self, step: int) -> None:
        waited, self._pending_wait = self._pending_wait, 0.0
        self._pipeline.put(step, {DATA_WAIT_TIME: waited}, None)

    # -- signals -----------------------------------------------------------------------

    def report_signal(
        self,
        kind: SignalKind | str,
        *,
        exit_code: int | None = None,
        signal: str | None = None,
        error_type: str | None = None,
        reason: str = "",
        message: str = "",
        time: datetime | None = None,
        timeout: float | None = None,
    ) -> bool:
        """Tell the platform something happened to this process; True once accepted.

        Sent at once from the calling thread, within ``timeout`` seconds (default 2,
        retries included), with this process's host, process index, pid and last step: it
        is meant for exit paths, where nothing can wait for a thread. Works after
        :meth:`finish` too. Never raises for telemetry reasons (a bad ``kind`` or an
        unreachable platform log a warning and return False). ``time`` (when it happened)
        defaults to now; a naive one is local time.
        """
        if self._disabled or self._offline is not None:  # a signal describes a live process
            return False
        try:
            kind = SignalKind(kind)
        except ValueError:
            logger.warning("mldiag.signal.bad_kind kind=%r (not sent)", kind)
            return False
        when = datetime.now(UTC) if time is None else time.astimezone(UTC)  # naive: local
        report = Signal(
            kind=kind,
            host=self.host,
            process_index=self.process_index,
            pid=os.getpid(),
            step=self._last_step(),
            time=when,
            exit_code=exit_code,
            signal=signal,
            error_type=error_type,
            reason=reason,
            message=message,
        )
        return self._signals.send(report, DEFAULT_SIGNAL_TIMEOUT if timeout is None else timeout)

    def preemption_notice(self, reason: str = "", message: str = "") -> bool:
        """Report that the platform announced a preemption or maintenance of this host.

        For a workload's or an orchestrator's hook (a GCE maintenance-event watcher, a
        Kubernetes preStop hook, a Slurm ``--signal`` handler): the event detector counts it
        as a planned interruption. Sent like :meth:`report_signal`; True once accepted.
        """
        return self.report_signal(SignalKind.PREEMPTION_NOTICE, reason=reason, message=message)

    def _report_exception(self, exc: BaseException) -> None:
        if isinstance(exc, SystemExit) and exc.code in (None, 0):
            return  # a clean sys.exit() is no crash
        self.report_signal(
            SignalKind.EXCEPTION,
            error_type=_error_type(exc),
            message=_text(exc)[:MAX_EXCEPTION_CHARS],
        )

    def _last_step(self) -> int | None:
        """The last step logged (None before the first), for heartbeats."""
        return self._next_step - 1 if self._next_step else None

    def _record_system(self, sample: Sample) -> None:
        """Record one system sample at the current step (one host sampler per machine)."""
        step = max(self._next_step - 1, 0)
        for labels, values in by_labels(sample):
            self._pipeline.put(step, values, labels)

    # -- profiles ----------------------------------------------------------------------

    def _profiling(self) -> RunProfiles:
        """This run's uploads and reports of profiles (:mod:`mldiag.xprof`), made on first use."""
        with self._profiles_lock:
            if self._profiles is None:
                self._profiles = RunProfiles(
                    self.settings, self.run_id, self.host, gcs_path=self.spec.gcs_path
                )
            return self._profiles

    def _serve_profiler(self, port: int) -> None:
        """Start this process's profiler server and register it as a target of the run."""
        listening = start_profiler_server(port)
        if listening is None:
            return
        address = advertised_address(listening, self.settings.api_url)
        self._profiling().register_target(address, self.process_index)

    def flush(self, timeout: float | None = None) -> bool:
        """Send everything buffered; wait at most ``timeout`` seconds. True when all sent."""
        limit = self.settings.shutdown_timeout if timeout is None else timeout
        return self._pipeline.flush(limit)

    # -- lifecycle ---------------------------------------------------------------------

    def finish(
        self,
        status: Status = "COMPLETED",
        error: str | None = None,
        timeout: float | None = None,
        *,
        error_code: str | None = None,
    ) -> bool:
        """Flush, set the run's phase (process 0), and stop; bounded by ``timeout`` seconds.

        ``timeout`` defaults to ``shutdown_timeout``. ``error`` and ``error_code`` (an
        exception type, a signal name) become the run's ``errorDetails`` message and code.
        What could not be sent in time stays in the spool and is replayed by the next
        process that uses it. Returns whether every point was sent. Calling it again does
        nothing.
        """
        with self._finish_lock:
            if self._finished:
                return True
            self._finished = True
        global _current  # noqa: PLW0603  # the module-level "current run" of metrics.record
        with _current_lock:
            if _current is self:
                _current = None
        self._remove_exit_hooks()
        self._compiles.stop()
        if self._pending_wait:
            self._record_wait(max(self._next_step - 1, 0))
        if self._sampler is not None:
            self._sampler.stop()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        limit = self.settings.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        # Keep a slice of the time for the phase update: the last thing a user sees.
        reserve = min(2.0, limit / 4) if self._control is not None else 0.0
        if self._profiles is not None:
            # First: an upload cut short is lost, unsent points stay spooled for later.
            self._profiles.close(max(deadline - reserve - time.monotonic(), 0.0))
        sent = self._pipeline.close(max(deadline - reserve - time.monotonic(), 0.0))
        if self._offline is not None:
            self._offline.finish(RunPhase(status), error, error_code)
        if self._control is not None:
            phase = RunPhase(status)
            self._set_phase(phase, error, error_code, deadline)
        if sent:
            self._http.close()
        return sent

    def _describe_offline(self) -> None:
        """Store the configs with the environment's sections (offline collector thread)."""
        if self._offline is not None:
            self._offline.describe(with_environment(self.spec.configs))

    def _ensure_run(self, timeout: float) -> bool:
        """Create or attach to the run (sender thread); True once done or given up."""
        if self._control is None:
            return True
        if self._described is None:  # collected here, on the sender thread, once
            configs = with_environment(self.spec.configs)
            self._described = dataclasses.replace(self.spec, configs=configs)
        status = self._control.ensure_run(self._described, timeout)
        self._run_ready = status in (ControlStatus.DONE, ControlStatus.ATTACHED)
        if status is ControlStatus.ATTACHED and not self._finished:
            # A restart resumes the run: whatever ended it before, it is running again.
            self._control.set_phase(self.run_id, RunPhase.ACTIVE, None, timeout)
        return status is not ControlStatus.RETRY

    def _set_phase(
        self, phase: RunPhase, error: str | None, code: str | None, deadline: float
    ) -> None:
        assert self._control is not None  # noqa: S101  # callers check
        if not self._run_ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._ensure_run(min(remaining, self.settings.request_timeout))
        while (remaining := deadline - time.monotonic()) > 0:
            status = self._control.set_phase(
                self.run_id, phase, error, min(remaining, self.settings.request_timeout), code=code
            )
            if status is not ControlStatus.RETRY:
                return
            time.sleep(min(0.25, max(deadline - time.monotonic(), 0.0)))
        logger.warning("mldiag.run.phase_not_set run=%s phase=%s", self.run_id, phase.value)

    def __enter__(self) -> Self:
        """The run itself; leaving the block finishes it."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """COMPLETED on a normal exit; when an exception escapes, an ``EXCEPTION`` signal,
        then FAILED with the error (its type as the error code)."""
        if exc is None:
            self.finish("COMPLETED")
        else:
            self._report_exception(exc)
            self.finish("FAILED", error=_describe(exc), error_code=_error_type(exc))

    # -- exit handling -----------------------------------------------------------------

    def _install_exit_hooks(self) -> None:
        atexit.register(self._at_exit)
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        with contextlib.suppress(ValueError, OSError):
            previous = signal.getsignal(signal.SIGTERM)
            if previous is not signal.SIG_IGN:
                self._previous_sigterm = previous
                signal.signal(signal.SIGTERM, self._on_sigterm)

    def _remove_exit_hooks(self) -> None:
        atexit.unregister(self._at_exit)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_excepthook or sys.__excepthook__
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError, OSError, TypeError):
                if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                    signal.signal(signal.SIGTERM, self._previous_sigterm or signal.SIG_DFL)

    def _excepthook(
        self,
        exc_type: type[BaseException],
        exc: BaseException,
        traceback: TracebackType | None,
    ) -> None:
        self._exit_error = _describe(exc)
        self._exit_code = _error_type(exc)
        previous = self._previous_excepthook or sys.__excepthook__
        try:
            previous(exc_type, exc, traceback)  # the traceback first: people look there
        finally:
            self._report_exception(exc)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self._exit_error = f"terminated by signal {name}"
        self._exit_code = name
        # Reported before anything else: the handler below may end the process.
        self.report_signal(SignalKind.SIGTERM, signal=name)
        previous = self._previous_sigterm
        if callable(previous):
            # The program's own handler decides what happens next; the exit hook finishes
            # the run as FAILED with this reason whenever the process does exit.
            previous(signum, frame)
            return
        self.finish("FAILED", error=self._exit_error, error_code=self._exit_code)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _at_exit(self) -> None:
        if self._exit_error is not None:
            self.finish("FAILED", error=self._exit_error, error_code=self._exit_code)
        else:
            self.finish("COMPLETED")

    # -- spool -------------------------------------------------------------------------

    def _open_spool(self, replay_all: bool) -> tuple[BatchQueue, list[Spool]]:
        root = self.settings.spool_dir
        if root is None:
            return MemoryQueue(self.run_id), []
        name = writer_name(self.host, self.process_index)
        directory = root / self.run_id / name
        try:
            try:
                spool = Spool(directory, self.run_id)
            except SpoolError:  # the same host and index live twice: a directory of its own
                directory = root / self.run_id / f"{name}-{os.getpid()}"
                spool = Spool(directory, self.run_id)
        except OSError as error:
            logger.warning(
                "mldiag.spool.unavailable dir=%s error=%s (batches wait in memory)", root, error
            )
            return MemoryQueue(self.run_id), []
        try:
            only = None if replay_all else self.run_id
            orphans = orphan_spools(root, exclude=directory, run_id=only)
        except OSError:
            orphans = []
        return spool, orphans


class DisabledRun(Run):
    """What :func:`init` returns under ``MLDIAG_MODE=disabled``: a :class:`Run` that does
    nothing. No thread, no socket, no file, no exit hook; ``log`` only counts steps so that
    :attr:`step` stays meaningful. The switch for CI and notebooks."""

    def __init__(self, spec: RunSpec, *, process_index: int, host: str) -> None:
        # Deliberately not Run.__init__: that starts threads and opens the spool.
        self.spec = spec
        self.settings = Settings()
        self.process_index = process_index
        self.host = host
        self._next_step = 0
        self._finished = False
        self._disabled = True

    @property
    def mode(self) -> Mode:
        """Always :attr:`Mode.DISABLED`."""
        return Mode.DISABLED

    def log(
        self,
        metrics: Mapping[str, Any],  # noqa: ARG002  # the Run's signature
        step: int | None = None,
        *,
        labels: Mapping[str, str] | None = None,  # noqa: ARG002
    ) -> None:
        """Nothing recorded; the next step advances as :meth:`Run.log` would."""
        if type(step) is int and step >= 0:
            self._next_step = step + 1
        elif step is None:
            self._next_step += 1

    def record(self, *args: Any, **kwargs: Any) -> None:
        """Nothing recorded."""

    @contextlib.contextmanager
    def data_wait(self) -> Iterator[None]:
        """Nothing timed."""
        yield

    @contextlib.contextmanager
    def checkpoint(self) -> Iterator[None]:
        """Nothing timed."""
        yield

    def watch_jax(self) -> bool:
        """Nothing watched (False)."""
        return False

    def report_signal(self, *args: Any, **kwargs: Any) -> bool:  # noqa: ARG002
        """Nothing sent (False)."""
        return False

    def flush(self, timeout: float | None = None) -> bool:  # noqa: ARG002
        """Nothing to send (True)."""
        return True

    def finish(self, *args: Any, **kwargs: Any) -> bool:  # noqa: ARG002
        """No longer the current run; nothing else (True)."""
        global _current  # noqa: PLW0603  # the module-level "current run"
        self._finished = True
        with _current_lock:
            if _current is self:
                _current = None
        return True

    def _profiling(self) -> RunProfiles:
        raise RuntimeError("mldiag is disabled (MLDIAG_MODE=disabled): no profile is recorded")


def init(
    name: str = "",
    run_set: str = "default",
    configs: Mapping[str, Any] | None = None,
    *,
    run_id: str | None = None,
    workload_id: str | None = None,
    api_url: str | None = None,
    ingestion_url: str | None = None,
    token: str | None = None,
    process_index: int | None = None,
    labels: Mapping[str, str] | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
    gcs_path: str = "",
    monitoring: Mapping[str, Any] | None = None,
    create_run: bool = True,
    handle_exit: bool = True,
    replay_all: bool = True,
    shutdown_timeout: float | None = None,
    batch_points: int | None = None,
    flush_interval: float | None = None,
    max_buffered_points: int | None = None,
    request_timeout: float | None = None,
    heartbeat_interval: float | None = None,
    log_system_metrics: bool = True,
    system_metrics_interval: float | None = None,
    control: RunControl | None = None,
    profiler_port: int | None = None,
    config: Mapping[str, Any] | None = None,
    project: str | None = None,
    location: str | None = None,
    mode: Mode | str | None = None,
) -> Run:
    """Start recording a run, creating it (process 0) or attaching to it.

    Nothing here waits for the network: the run is created on the SDK's thread, and the
    run id is known at once (``run_id``, ``MLDIAG_RUN_ID``, derived from ``workload_id`` /
    the Slurm or Kubernetes job, else random). Spooled batches of earlier processes are
    replayed (those of every run when ``replay_all``, else this run's only).

    Args:
        name: Display name (defaults to the run id).
        run_set: Group of related runs.
        configs: User configs, stored with the run alongside software/hardware configs.
        run_id: Explicit run id.
        workload_id: Stable workload name the run id is derived from.
        api_url: Run registry URL (``MLDIAG_API_URL``).
        ingestion_url: Ingestion URL (``MLDIAG_INGESTION_URL``).
        token: API token (``MLDIAG_TOKEN``).
        process_index: This process's index; only 0 changes the run.
        labels: Labels of the run resource.
        spool_dir: Root of the disk spool (``MLDIAG_SPOOL_DIR``).
        gcs_path: Where the run's artifacts live.
        monitoring: Overrides of the detection rules for this run, e.g.
            ``{"rules": {"hang": {"thresholds": {"floorSeconds": 60}}}}`` (docs/monitoring.md).
        create_run: False to only record metrics (the run is managed elsewhere);
            ``MLDIAG_CREATE_RUN=0`` says the same from a supervisor such as ``mldiag run``.
        handle_exit: Mark the run at exit, on uncaught exceptions and on SIGTERM.
        replay_all: Replay orphaned spools of every run, not only this one.
        shutdown_timeout: Most seconds ``finish`` / exit spend sending (default 10).
        batch_points: Points per batch (default 5000).
        flush_interval: Most seconds a point waits before it is sent (default 1).
        max_buffered_points: Bound of the in-memory buffer (default 500,000).
        request_timeout: Seconds per HTTP request (default 5).
        heartbeat_interval: Seconds between heartbeats (``MLDIAG_HEARTBEAT_INTERVAL``,
            default 10; 0 sends none).
        log_system_metrics: Sample the host (psutil), NVIDIA GPUs (NVML) and TPUs (libtpu)
            where present, and contention (host CPU by mode, load, swap, disks, network,
            this process's tree, the top other processes while the host is busy) every
            ``MLDIAG_CONTENTION_INTERVAL`` seconds (default 1; 0 turns that part off);
            False turns it all off.
        system_metrics_interval: Seconds between two system samples
            (``MLDIAG_SYSTEM_METRICS_INTERVAL``, default 10; 0 turns it off).
        control: Replaces the HTTP :class:`RunControl` (tests, other backends).
        profiler_port: Start ``jax.profiler.start_server`` on this port (0: a free one) for
            on-demand captures and register it as the run's profiler target
            (``MLDIAG_PROFILER_PORT``; default: no server). Imports JAX. The advertised
            address is ``MLDIAG_PROFILER_ADVERTISE_HOST``, else the local address of the
            route to the registry (see :mod:`mldiag.profiler_server`).
        config: ``configs`` under the name W&B and others use (give one or the other).
        project: Project to create the run in (``MLDIAG_PROJECT``; default: ``default``),
            the ``projects/{project}/locations/{location}/`` of its resource name.
        location: Location to create it in (``MLDIAG_LOCATION``; default: ``local``).
        mode: ``online`` (default), ``offline`` (record to the spool for ``mldiag sync``,
            send nothing) or ``disabled`` (do nothing); ``MLDIAG_MODE`` when not given.
            Another value raises :class:`mldiag.config.ModeError`.
    """
    chosen = resolve_mode(mode)
    if config is not None:
        if configs is not None:
            raise TypeError("init() takes configs= or config=, not both")
        configs = config
    if chosen is Mode.DISABLED:
        return _start_disabled(name, run_set, configs, run_id, workload_id, process_index)
    overrides = {
        key: value
        for key, value in (
            ("shutdown_timeout", shutdown_timeout),
            ("batch_points", batch_points),
            ("flush_interval", flush_interval),
            ("max_buffered_points", max_buffered_points),
            ("request_timeout", request_timeout),
            ("heartbeat_interval", heartbeat_interval),
        )
        if value is not None
    }
    settings = Settings.resolve(
        api_url=api_url,
        ingestion_url=ingestion_url,
        token=token,
        spool_dir=spool_dir,
        tuning=overrides,
    )
    resolved_id = resolve_run_id(run_id, workload_id)
    port = resolve_profiler_port(profiler_port)
    if os.environ.get("MLDIAG_CREATE_RUN", "").strip().lower() in ("0", "false", "no"):
        create_run = False  # a supervisor (`mldiag run`) owns the run and its final state
    spec = RunSpec(
        run_id=resolved_id,
        display_name=name or resolved_id,
        run_set=run_set or "default",
        labels=dict(labels or {}),
        configs={"userConfigs": user_configs(configs)},
        gcs_path=gcs_path,
        monitoring=dict(monitoring or {}),
    )
    run_control: RunControl | None = None
    project = project or os.environ.get("MLDIAG_PROJECT") or None
    location = location or os.environ.get("MLDIAG_LOCATION") or None
    index = process_index_of(process_index)
    host = host_name()
    offline: OfflineRecord | None = None
    if chosen is Mode.OFFLINE:
        offline = OfflineRecord(
            settings.spool_dir or default_root(),
            spec,
            writer_name(host, index),
            primary=index == 0,
            create_run=create_run,
            project=project,
            location=location,
        )
    elif create_run:
        run_control = control or HttpRunControl(
            client(settings.token, settings.request_timeout),
            settings.api_url,
            project=project,
            location=location,
        )
    run = Run(
        spec,
        settings,
        process_index=index,
        host=host,
        control=run_control,
        handle_exit=handle_exit,
        replay_all=replay_all,
        system_metrics_interval=_system_interval(log_system_metrics, system_metrics_interval),
        offline=offline,
    )
    _make_current(run)
    if port is not None and offline is None:  # a capture is uploaded at once: online only
        run._serve_profiler(port)  # the module's own class
    return run


def _make_current(run: Run) -> None:
    global _current  # noqa: PLW0603  # the module-level "current run" of metrics.record
    with _current_lock:
        _current = run


def _start_disabled(
    name: str,
    run_set: str,
    configs: Mapping[str, Any] | None,
    run_id: str | None,
    workload_id: str | None,
    process_index: int | None,
) -> Run:
    """A :class:`DisabledRun`, made current; it reads the environment only for the id."""
    resolved_id = resolve_run_id(run_id, workload_id)
    spec = RunSpec(
        run_id=resolved_id,
        display_name=name or resolved_id,
        run_set=run_set or "default",
        configs={"userConfigs": dict(configs or {})},
    )
    run = DisabledRun(spec, process_index=process_index_of(process_index), host=host_name())
    _make_current(run)
    return run


def _system_interval(enabled: bool, interval: float | None) -> float | None:
    """Seconds between system samples, or None when they are off."""
    if not enabled:
        return None
    if interval is None:
        interval = env_seconds(os.environ, "MLDIAG_SYSTEM_METRICS_INTERVAL", 10.0)
    return interval if interval > 0 else None


def process_index_of(explicit: int | None) -> int:
    """``explicit``, else the process index from the environment."""
    return process_index(explicit)


def machinelearning_run(
    name: str,
    run_group: str = "",
    configs: Mapping[str, Any] | None = None,
    gcs_path: str | None = None,
    base_url: str | None = None,
    on_demand_xprof: bool = False,
    log_system_metrics: bool = False,
    metrics_record_interval_sec: float = 10.0,
    run_workload_id: str | None = None,
    metric_only_run: bool = False,
    **kwargs: Any,
) -> Run:
    """The official SDK's entry point, so that moving over is an import change.

    ``run_group`` is the run set, ``base_url`` the API URL, ``run_workload_id`` the workload
    id, ``metric_only_run`` skips creating the run, ``log_system_metrics`` samples the host
    and GPUs every ``metrics_record_interval_sec``; ``on_demand_xprof`` starts the profiler
    server for on-demand captures (port 9999 unless ``profiler_port=`` or
    ``MLDIAG_PROFILER_PORT`` says otherwise). ``project=`` and ``location=`` (or
    ``region=``, Google Cloud's word for it) place the run as in :func:`init`. Other keyword
    arguments go to :func:`init`.
    """
    if "region" in kwargs:
        region = kwargs.pop("region")
        if kwargs.get("location") not in (None, region):
            raise TypeError("machinelearning_run() takes location= or region=, not both")
        kwargs["location"] = region
    if on_demand_xprof:
        kwargs["profiler_port"] = resolve_profiler_port(kwargs.get("profiler_port"), on_demand=True)
    return init(
        name=name,
        run_set=run_group or "default",
        configs=configs,
        api_url=base_url,
        gcs_path=gcs_path or "",
        workload_id=run_workload_id,
        create_run=not metric_only_run,
        log_system_metrics=log_system_metrics,
        system_metrics_interval=metrics_record_interval_sec,
        **kwargs,
    )


def _disable_in_child(reference: weakref.ref[Run]) -> None:
    run = reference()
    if run is not None:
        run._finished = True  # the module's own class
        run._disabled = True
        atexit.unregister(run._at_exit)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_text(exc)}"[:4000]


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001  # a broken __str__ must not break the exit path
        return f"<{type(exc).__name__} without a printable message>"


def _error_type(exc: BaseException) -> str:
    """The exception's class, module-qualified unless built in (``jaxlib…XlaRuntimeError``
    tells more than its bare name)."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"

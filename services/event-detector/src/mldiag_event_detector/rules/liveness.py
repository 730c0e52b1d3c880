"""Liveness: hangs, orchestrator interruptions (signals, restarts) and terminations.

A training job's run (``RunState.job``) is different in one way: its replicas go down and
come back under the job's control, and the job ends the run. So a replica's exit, exception
or SIGTERM is remembered (``RunState.downs``) rather than judged; the replica coming back (a
process under its host name first heard after it went down: the launcher and an SDK in its
program both beat, so a second pid alone is no restart) is the ORCHESTRATOR_INTERRUPTION,
opened from when it went down; and the job's failure (the run FAILED by run-registry) is the
one TERMINATION, with the most telling reason a replica left. A cancelled job terminates
nothing.
"""

import re
from datetime import datetime, timedelta

from pydantic import JsonValue

from mldiag_event_detector.book import EventBook, Finding
from mldiag_event_detector.state import HostState, RunState
from mldiag_schemas.events import EventType, Evidence, MetricWindow, Severity
from mldiag_schemas.monitoring import RuleName
from mldiag_schemas.runs import ErrorDetails
from mldiag_schemas.telemetry import SignalKind, SignalRequest

HANG = "hang"
INTERRUPTION = "interruption"
TERMINATION = "termination"

HEARTBEAT_GRACE = 2.0
"""A process is alive while its last heartbeat is younger than this many intervals."""


def typical_step_seconds(state: RunState) -> float | None:
    """The run's typical step: median logged step time, else median gap between new steps."""
    return state.typical_step_seconds()


def hang_timeout(book: EventBook) -> float:
    """max(stepFactor x typical step, floor) in seconds; at least ``startupSeconds`` while
    no step time is known (a run compiling its first step is not hung)."""
    rule = book.policy.thresholds(RuleName.HANG)
    typical = typical_step_seconds(book.state)
    if typical is None:
        return max(rule["floorSeconds"], rule["startupSeconds"])
    return max(rule["stepFactor"] * typical, rule["floorSeconds"])


def last_progress(state: RunState) -> datetime | None:
    """When any host last recorded a new step."""
    return max(
        (host.last_progress_at for host in state.hosts.values() if host.last_progress_at),
        default=None,
    )


def next_check(book: EventBook) -> datetime | None:
    """When the hang rule has to look again (None: nothing to wait for)."""
    state = book.state
    progress = last_progress(state)
    if not state.active or progress is None or not book.policy.enabled(RuleName.HANG):
        return None
    if book.is_open(HANG):
        return None  # progress (a message) resolves it; the clock has nothing to add
    return progress + timedelta(seconds=hang_timeout(book))


def _alive(host: HostState, now: datetime) -> bool | None:
    if not host.heartbeats:
        return None
    return any(
        (now - beat.received_at).total_seconds() <= HEARTBEAT_GRACE * beat.interval_seconds
        for beat in host.heartbeats.values()
    )


def check_hang(book: EventBook, now: datetime) -> None:
    """No new step on any host for the timeout while the run is active: a hang."""
    state = book.state
    progress = last_progress(state)
    if not state.active or progress is None or book.is_open(HANG):
        return
    if not book.policy.enabled(RuleName.HANG):
        return
    timeout = hang_timeout(book)
    stalled = (now - progress).total_seconds()
    if stalled < timeout:
        return
    alive = {name: _alive(host, now) for name, host in state.hosts.items()}
    alive_hosts = sorted(name for name, up in alive.items() if up)
    silent_hosts = sorted(name for name, up in alive.items() if up is False)
    stopped = sorted(
        state.hosts,
        key=lambda name: (state.hosts[name].last_progress_at or progress, name),
    )
    if alive_hosts:
        liveness = f"{len(alive_hosts)} host(s) still heart-beating"
    elif silent_hosts:
        liveness = "no process heart-beating any more"
    else:
        liveness = "no heartbeats from this run"
    book.hold(
        Finding(
            rule=RuleName.HANG,
            key=HANG,
            type=EventType.HANG,
            severity=Severity.CRITICAL,
            display_name=f"No step progress for {stalled:.0f} s (timeout {timeout:.0f} s);"
            f" {liveness}",
            start_time=progress,
            hosts=sorted(state.hosts),
            evidence=Evidence(
                metric="step",
                windows=[
                    MetricWindow(
                        metric="step",
                        host=name,
                        end_step=state.hosts[name].last_step,
                        end_time=state.hosts[name].last_progress_at,
                    )
                    for name in stopped
                ],
                facts={
                    "timeoutSeconds": timeout,
                    "stalledSeconds": stalled,
                    "typicalStepSeconds": typical_step_seconds(state),
                    "aliveHosts": alive_hosts,
                    "silentHosts": silent_hosts,
                    "stoppedFirst": stopped[0] if stopped else "",
                },
            ),
            time_lost_seconds=stalled,
        ),
        now,
    )


def on_progress(book: EventBook, host: str, step: int, now: datetime) -> None:
    """A host recorded a new step: a hang is over; an interruption is over once the run is
    back past the step it had reached."""
    hang = book.state.open_events.get(HANG)
    if hang is not None:
        book.clear(
            HANG,
            now,
            time_lost_seconds=(now - hang.start_time).total_seconds(),
            facts={"resumedAtStep": step, "resumedOnHost": host},
        )
    interruption = book.state.open_events.get(INTERRUPTION)
    reached = book.state.max_step_before_restart
    if interruption is not None and reached is not None and step > reached:
        book.state.max_step_before_restart = None
        book.clear(
            INTERRUPTION,
            now,
            time_lost_seconds=(now - interruption.start_time).total_seconds(),
            facts={"recoveredAtStep": step},
        )


RESTART_PAIRING_SECONDS = 120.0
"""One restart is seen twice, as a new process (heartbeats) and as steps recorded again
(metrics), through different consumers and in either order: the second sighting within this
long of the first is the same interruption."""


def _seen_before(mark: datetime | None, at: datetime) -> bool:
    return mark is not None and abs((at - mark).total_seconds()) <= RESTART_PAIRING_SECONDS


def _interruption(
    book: EventBook,
    host: str,
    cause: str,
    facts: dict[str, str | int | None],
    at: datetime,
    since: datetime | None = None,
    *,
    known: bool = False,
) -> None:
    """Open the interruption, or add the cause to the open one. A ``known`` restart (its
    other sighting came first) only adds to the event still open: one the run has already
    recovered from is not opened again."""
    state = book.state
    if not book.policy.enabled(RuleName.INTERRUPTION):
        return
    current = state.open_events.get(INTERRUPTION)
    if known and current is None:
        return
    hosts = sorted({*(current.hosts if current else []), *([host] if host else [])})
    previous = current.evidence.facts if current else {}
    earlier = previous.get("causes")
    causes: list[JsonValue] = list(earlier) if isinstance(earlier, list) else []
    if cause not in causes:  # every host restarting from one checkpoint says the same; the
        causes.append(cause)  # event's hosts say where, its causes only what
    book.hold(
        Finding(
            rule=RuleName.INTERRUPTION,
            key=INTERRUPTION,
            type=EventType.ORCHESTRATOR_INTERRUPTION,
            severity=Severity.WARNING,
            display_name=current.display_name if current else f"Interrupted: {cause}",
            start_time=current.start_time if current else (last_progress(state) or since or at),
            hosts=hosts,
            evidence=Evidence(facts={**previous, **facts, "causes": causes}),
        ),
        at,
        news=True,
    )


def on_restart(
    book: EventBook, name: str, host: HostState, reached: int, step: int, now: datetime
) -> None:
    """A host recorded a step it had recorded before: it restarted from a checkpoint."""
    state = book.state
    known = _seen_before(host.new_process_at, now)
    if known:
        host.new_process_at = None
    else:
        host.restarts += 1
        host.step_again_at = now
        state.max_step_before_restart = max(state.max_step_before_restart or 0, reached)
    state.note(f"{now.isoformat()} restart on {name or 'host'}: step {step} again after {reached}")
    _interruption(
        book,
        name,
        f"restart from step {step} (had reached {reached})",
        {"restartedAtStep": step, "reachedStep": reached, "lostSteps": reached - step + 1},
        now,
        known=known,
    )


def on_new_process(
    book: EventBook, name: str, host: HostState, old_pid: int, new_pid: int, now: datetime
) -> None:
    """A process index came back with a new pid: the process was restarted."""
    state = book.state
    state.note(f"{now.isoformat()} new process on {name or 'host'}: pid {old_pid} → {new_pid}")
    known = _seen_before(host.step_again_at, now)
    if known:
        host.step_again_at = None
    else:
        host.restarts += 1
        host.new_process_at = now
        if host.last_step is not None:
            state.max_step_before_restart = max(state.max_step_before_restart or 0, host.last_step)
    _interruption(
        book, name, f"process restarted (pid {old_pid} → {new_pid})", {}, now, known=known
    )


# --- a training job's replicas -----------------------------------------------------------------

MAX_PIDS = 16
"""Processes remembered per host of a job's run (the launcher, an SDK in its program, and a
few attempts back)."""


def on_job_heartbeat(book: EventBook, name: str, host: HostState, pid: int, at: datetime) -> None:
    """A process of a job's replica is alive. Two processes beat under one replica (the
    launcher, and an SDK in the program it runs), so a new pid alone is no restart: one is a
    process first heard after the replica went down."""
    if not pid or str(pid) in host.pids:
        return
    host.pids[str(pid)] = at
    if len(host.pids) > MAX_PIDS:
        oldest = min(host.pids, key=lambda key: host.pids[key])
        del host.pids[oldest]
    _job_restart_check(book, name, host)


def _down_time(down: dict[str, JsonValue]) -> datetime | None:
    at = down.get("at")
    return datetime.fromisoformat(at) if isinstance(at, str) else None


def _down_pids(down: dict[str, JsonValue]) -> list[int]:
    pids = down.get("pids")
    return [pid for pid in pids if isinstance(pid, int)] if isinstance(pids, list) else []


def _replica_down(
    book: EventBook, signal: SignalRequest, facts: dict[str, str | int | None], at: datetime
) -> None:
    """A replica of a job's run went down: remember why and when (its first report), keeping
    the most telling reason (a SIGTERM is what the job sends the others once one has failed,
    so it yields to any other reason). A report from a process the job already replaced is
    history, not a replica down."""
    state = book.state
    host = state.host(signal.host)
    if signal.pid and signal.pid in host.gone_pids:
        return
    if host.last_step is not None:
        state.max_step_before_restart = max(state.max_step_before_restart or 0, host.last_step)
    current = state.downs.get(signal.host)
    pids = sorted(
        {*(_down_pids(current) if current else []), *([signal.pid] if signal.pid else [])}
    )
    kept: dict[str, JsonValue] = {k: v for k, v in facts.items() if v not in (None, "")}
    if current is None:
        state.downs[signal.host] = {**kept, "at": at.isoformat(), "pids": list(pids)}
    else:
        telling = current.get("classification") == "killed" and kept.get("classification") not in (
            None,
            "killed",
        )
        earliest = min(_down_time(current) or at, at)
        base = kept if telling else current
        state.downs[signal.host] = {**base, "at": earliest.isoformat(), "pids": list(pids)}
    _job_restart_check(book, signal.host, host)


def _job_restart_check(book: EventBook, name: str, host: HostState) -> None:
    """The replica went down and a process first heard after that beats: the job restarted
    it. Whichever of the two facts arrives last (they come through different consumers)
    finds the restart."""
    state = book.state
    down = state.downs.get(name)
    went_down = _down_time(down) if down is not None else None
    if down is None or went_down is None:
        return
    old = set(_down_pids(down)) | set(host.gone_pids)
    newcomers = sorted(
        (first, int(pid))
        for pid, first in host.pids.items()
        if int(pid) not in old and first > went_down
    )
    if not newcomers:
        return
    back_at, new_pid = newcomers[0]
    del state.downs[name]
    host.gone_pids = [*host.gone_pids, *_down_pids(down)][-2 * MAX_PIDS :]
    known = _seen_before(host.step_again_at, back_at)
    if known:
        host.step_again_at = None
    else:
        host.restarts += 1
        host.new_process_at = back_at
    why = down.get("classification") or "went down"
    state.note(f"{back_at.isoformat()} new process on {name or 'host'} after it went down ({why})")
    _interruption(
        book,
        name,
        f"{name or 'a replica'} went down ({why}) and the job restarted it (new process {new_pid})",
        {"restartedReplica": name, "downClassification": str(why)},
        back_at,
        since=went_down,
        known=known,
    )
    event = state.open_events.get(INTERRUPTION)
    if event is not None and state.max_step_before_restart is None and not state.downs:
        # No step to catch up on and every replica is back: the job has recovered.
        book.clear(
            INTERRUPTION,
            back_at,
            time_lost_seconds=max((back_at - event.start_time).total_seconds(), 0.0),
            facts={"recoveredBy": "every replica running again"},
        )


# --- signals and terminations ----------------------------------------------------------------

_ACCELERATOR_OOM = re.compile(
    r"RESOURCE_EXHAUSTED|out of memory while trying to allocate|CUDA out of memory|"
    r"HBM|CUDA_ERROR_OUT_OF_MEMORY|Ran out of memory in memory space",
    re.IGNORECASE,
)
_HOST_OOM = re.compile(r"MemoryError|Cannot allocate memory|oom.?kill|Killed\b", re.IGNORECASE)
_HARDWARE = re.compile(
    r"DATA_LOSS|\bXid\b|\bECC\b|uncorrectable|hardware error|device lost|"
    r"CUDA_ERROR_ECC|NVLink|chip failure|TPU .*(halted|failure)",
    re.IGNORECASE,
)

_EXCEPTION_PREFIX = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit))\b")
"""``ValueError: ...`` — how the SDKs describe an exception in a FAILED run's message."""


def classify(
    *,
    exit_code: int | None = None,
    signal: str | None = None,
    error_type: str | None = None,
    reason: str = "",
    message: str = "",
) -> str:
    """Why a process ended, from what it left: oom_accelerator, oom_host, hardware_error,
    user_exception, killed, exit_code."""
    text = f"{error_type or ''} {message}"
    if _ACCELERATOR_OOM.search(text):
        return "oom_accelerator"
    if (
        reason == "oom_killed"
        or _HOST_OOM.search(text)
        or (signal == "SIGKILL" and exit_code == 137)
    ):
        return "oom_host"
    if _HARDWARE.search(text):
        return "hardware_error"
    if error_type:
        return "user_exception"
    if signal:
        return "killed"
    return "exit_code"


def _termination(
    book: EventBook, host: str, facts: dict[str, str | int | None], at: datetime
) -> None:
    if not book.policy.enabled(RuleName.TERMINATION):
        return
    state = book.state
    key = f"{TERMINATION}:{state.incarnation}"
    existing = state.occurrences.get(key, 0)
    words = {
        "oom_accelerator": "accelerator out of memory",
        "oom_host": "host out of memory",
        "hardware_error": "hardware error",
        "user_exception": "an exception",
        "killed": "a signal",
        "exit_code": "a non-zero exit",
    }
    what = words.get(str(facts.get("classification")), "an error")
    detail = facts.get("errorType") or facts.get("signal") or facts.get("exitCode")
    where = f" on host {host}" if host else ""
    finding = Finding(
        rule=RuleName.TERMINATION,
        key=key,
        type=EventType.TERMINATION,
        severity=Severity.CRITICAL,
        display_name=f"Run terminated by {what}{where}" + (f" ({detail})" if detail else ""),
        start_time=at,
        hosts=[host] if host else [],
        evidence=Evidence(facts={k: v for k, v in facts.items() if v not in (None, "")}),
    )
    if existing:
        return  # one termination per incarnation: the first report is the most specific
    book.instant(finding, at)


def on_signal(book: EventBook, signal: SignalRequest, at: datetime) -> None:
    """A lifecycle signal from a process of the run."""
    state = book.state
    where = signal.host or "host"
    if signal.kind is SignalKind.SIGTERM:
        state.note(f"{at.isoformat()} SIGTERM on {where}")
        if state.job:  # the job stops its replicas itself: a restart, a cancel or its end
            down = {"classification": "killed", "source": "SIGTERM", "signal": "SIGTERM"}
            _replica_down(book, signal, dict(down), at)
            return
        _interruption(book, signal.host, "SIGTERM", {"signal": "SIGTERM"}, at)
    elif signal.kind is SignalKind.PREEMPTION_NOTICE:
        state.note(f"{at.isoformat()} preemption notice on {where}: {signal.reason}")
        _interruption(book, signal.host, "preemption notice", {"preemption": signal.reason}, at)
    elif signal.kind is SignalKind.EXCEPTION or (
        signal.kind is SignalKind.PROCESS_EXITED and (signal.exit_code or signal.signal)
    ):
        state.note(f"{at.isoformat()} {signal.kind.value.lower()} on {where}")
        facts: dict[str, str | int | None] = {
            "classification": classify(
                exit_code=signal.exit_code,
                signal=signal.signal,
                error_type=signal.error_type,
                reason=signal.reason,
                message=signal.message,
            ),
            "source": signal.kind.value,
            "exitCode": signal.exit_code,
            "signal": signal.signal,
            "errorType": signal.error_type,
            "reason": signal.reason,
            "message": signal.message[-4000:],
            "step": signal.step,
        }
        if state.job:
            _replica_down(book, signal, facts, at)
            return
        _termination(book, signal.host, facts, at)


def on_phase(book: EventBook, phase: str, error: ErrorDetails | None, at: datetime) -> None:
    """The run's phase changed: an ended run resolves its events; FAILED is a termination."""
    state = book.state
    was_active = state.active
    state.phase = phase
    if phase == "ACTIVE":
        state.ended_at = None
        state.ended_keys.clear()
        if not was_active:
            state.incarnation += 1
            state.deviations.clear()  # slowdowns pending at the end belong to the last life
            state.note(f"{at.isoformat()} run active again")
        return
    state.ended_at = at
    if phase == "FAILED" and state.job:
        _job_failed(book, error, at)
    elif phase == "FAILED":
        message = error.message if error else ""
        code = error.code if error else None
        signal = next((s for s in ("SIGTERM", "SIGKILL", "SIGINT") if s in message), None)
        exception = _EXCEPTION_PREFIX.match(message)
        if code is None and exception and not signal:
            code = exception.group(1)
        _termination(
            book,
            "",
            {
                "classification": classify(
                    signal=signal, error_type=None if signal else code, message=message
                ),
                "source": "runPhase",
                "errorType": code,
                "signal": signal,
                "message": message[-4000:],
            },
            at,
        )
    state.downs.clear()
    book.clear_all(at)


JOB_CANCELLED = "JOB_CANCELLED"
"""``errorDetails.reason`` of the run of a cancelled job (run-registry's jobs room)."""


def _job_failed(book: EventBook, error: ErrorDetails | None, at: datetime) -> None:
    """The job failed (its run is FAILED): one termination, with the most telling reason a
    replica left (an error over a SIGTERM, then the earliest); none for a cancel."""
    state = book.state
    if error is not None and error.reason == JOB_CANCELLED:
        state.note(f"{at.isoformat()} job cancelled")
        return
    downs = sorted(state.downs.items(), key=lambda item: str(item[1].get("at", "")))
    telling = [item for item in downs if item[1].get("classification") != "killed"] or downs
    message = error.message if error else ""
    facts: dict[str, str | int | None] = {
        "source": "job",
        "jobErrorCode": error.code if error else None,
        "jobError": message[-4000:],
    }
    host = ""
    if telling:
        host, down = telling[0]
        facts |= {
            key: value
            for key, value in down.items()
            if key != "at" and isinstance(value, str | int) and key != "source"
        }
        facts["replicaSignal"] = str(down.get("source", ""))
    else:
        facts["classification"] = classify(message=message)
        facts["message"] = message[-4000:]
    _termination(book, host, facts, at)

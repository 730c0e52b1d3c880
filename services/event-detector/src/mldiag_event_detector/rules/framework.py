"""Framework: recompilation storms, input stalls, checkpoint stalls and config drift."""

from collections import Counter
from datetime import datetime, timedelta

from mldiag_event_detector.book import EventBook, Finding
from mldiag_event_detector.state import median
from mldiag_schemas.events import EventType, Evidence, MetricWindow, Severity
from mldiag_schemas.monitoring import CHECKPOINT_TIME, COMPILE_TIME, DATA_WAIT_TIME, RuleName

RECOMPILATION = "recompilation"
CHECKPOINT = "checkpoint-stall"
DRIFT = "config-drift"


def recompilation(book: EventBook, now: datetime) -> None:
    """More than ``maxCompiles`` compilations after warm-up within the window."""
    state = book.state
    if not book.policy.enabled(RuleName.RECOMPILATION) or not state.compiles:
        return
    rule = book.policy.thresholds(RuleName.RECOMPILATION)
    latest = max(compile_.at for compile_ in state.compiles)
    horizon = max(latest, now) - timedelta(seconds=rule["windowSeconds"])
    recent = [compile_ for compile_ in state.compiles if compile_.at >= horizon]
    if len(recent) <= rule["maxCompiles"]:
        book.clear(RECOMPILATION, now)
        return
    open_event = state.open_events.get(RECOMPILATION)
    since = open_event.start_time if open_event else recent[0].at
    lost = sum(c.seconds for c in state.compiles if c.at >= since)
    book.hold(
        Finding(
            rule=RuleName.RECOMPILATION,
            key=RECOMPILATION,
            type=EventType.RECOMPILATION_STORM,
            severity=Severity.WARNING,
            display_name=f"{len(recent)} compilations in {rule['windowSeconds']:.0f} s after"
            f" warm-up (steps {recent[0].step}-{recent[-1].step})",
            start_time=recent[0].at,
            evidence=Evidence(
                metric=COMPILE_TIME,
                first_bad_step=recent[0].step,
                windows=[
                    MetricWindow(
                        metric=COMPILE_TIME,
                        start_step=recent[0].step,
                        end_step=recent[-1].step,
                        start_time=recent[0].at,
                        end_time=recent[-1].at,
                        observed=float(len(recent)),
                        baseline=rule["maxCompiles"],
                        count=len(recent),
                    )
                ],
                facts={
                    "compiles": len(recent),
                    "compileSeconds": sum(c.seconds for c in recent),
                    "steps": [c.step for c in recent],
                },
            ),
            time_lost_seconds=lost,
        ),
        now,
    )


def input_stall(book: EventBook, now: datetime) -> None:
    """Data wait above ``waitFraction`` of the step time, in median over the window."""
    if not book.policy.enabled(RuleName.INPUT_STALL):
        return
    rule = book.policy.thresholds(RuleName.INPUT_STALL)
    window = int(rule["windowSteps"])
    shares: dict[str, float] = {}
    for name, host in book.state.hosts.items():
        if host.pace_is_throughput or len(host.data_wait.values) < window:
            continue
        pairs = [
            (wait, step_time)
            for step, wait in zip(
                host.data_wait.steps[-window:], host.data_wait.values[-window:], strict=True
            )
            if (step_time := host.pace.at(step))
        ]
        if len(pairs) >= window:
            shares[name] = median([wait / step_time for wait, step_time in pairs])
    if not shares:
        return
    stalled = {name: share for name, share in shares.items() if share > rule["waitFraction"]}
    key = "input-stall"
    if not stalled:
        book.clear(key, now)
        return
    share = median(list(stalled.values()))
    elapsed = book.elapsed(key, now)
    book.hold(
        Finding(
            rule=RuleName.INPUT_STALL,
            key=key,
            type=EventType.INPUT_STALL,
            severity=Severity.WARNING,
            display_name=f"Waiting for input {share:.0%} of each step on {len(stalled)} host(s)",
            start_time=now,
            hosts=sorted(stalled),
            evidence=Evidence(
                metric=DATA_WAIT_TIME,
                windows=[
                    MetricWindow(
                        metric=DATA_WAIT_TIME,
                        host=name,
                        start_step=book.state.hosts[name].data_wait.steps[-window],
                        end_step=book.state.hosts[name].data_wait.steps[-1],
                        observed=value,
                        baseline=rule["waitFraction"],
                        count=window,
                    )
                    for name, value in sorted(stalled.items())
                ],
                facts={"waitFraction": share},
            ),
            # The share of each step spent waiting is the share of wall time lost.
            time_lost_seconds=elapsed * share,
        ),
        now,
    )


def on_checkpoint(book: EventBook, host: str, step: int, seconds: float, at: datetime) -> None:
    """A checkpoint blocked for ``seconds``: too long against the time since the last one?"""
    state = book.state
    # Intervals on the workload's clock (point times), never mixed with the server's.
    previous = state.last_checkpoint_at or state.first_point_at
    if state.last_checkpoint_at is not None and at <= state.last_checkpoint_at:
        return  # another host's report of the same checkpoint
    state.last_checkpoint_at = at
    if previous is None or not book.policy.enabled(RuleName.CHECKPOINT_STALL):
        return
    rule = book.policy.thresholds(RuleName.CHECKPOINT_STALL)
    interval = max((at - previous).total_seconds(), seconds, 1e-9)
    fraction = seconds / interval
    state.checkpoint_fraction = fraction
    if seconds < rule["minSeconds"] or fraction <= rule["blockingFraction"]:
        book.clear(CHECKPOINT, at)
        return
    event = state.open_events.get(CHECKPOINT)
    book.hold(
        Finding(
            rule=RuleName.CHECKPOINT_STALL,
            key=CHECKPOINT,
            type=EventType.CHECKPOINT_STALL,
            severity=Severity.WARNING,
            display_name=f"Checkpoint at step {step} blocked training {seconds:.1f} s"
            f" ({fraction:.0%} of the {interval:.0f} s since the previous one)",
            start_time=at - timedelta(seconds=seconds),
            hosts=sorted({*(event.hosts if event else []), *([host] if host else [])}),
            evidence=Evidence(
                metric=CHECKPOINT_TIME,
                host=host,
                first_bad_step=event.evidence.first_bad_step if event else step,
                first_bad_value=seconds,
                facts={"blockingFraction": fraction, "intervalSeconds": interval},
            ),
            time_lost_seconds=(event.time_lost_seconds if event else 0.0) + seconds,
        ),
        at,
    )


def config_drift(book: EventBook, now: datetime) -> None:
    """Hosts of one run report different environment fingerprints."""
    if not book.policy.enabled(RuleName.CONFIG_DRIFT):
        return
    prints = {name: host.fingerprint for name, host in book.state.hosts.items() if host.fingerprint}
    if len(prints) < 2:
        return
    keys = sorted({key for fingerprint in prints.values() for key in fingerprint})
    differing = {
        key: {name: fingerprint.get(key, "") for name, fingerprint in sorted(prints.items())}
        for key in keys
        if len({fingerprint.get(key, "") for fingerprint in prints.values()}) > 1
    }
    if not differing:
        book.clear(DRIFT, now)
        return
    # The hosts outside the most common fingerprint drifted; on a tie, process 0's host (the
    # coordinator) is the reference.
    counts = Counter(tuple(sorted(fingerprint.items())) for fingerprint in prints.values())
    coordinator = next(
        (name for name, host in sorted(book.state.hosts.items()) if "0" in host.heartbeats),
        None,
    )

    def rank(item: tuple[tuple[tuple[str, str], ...], int]) -> tuple[int, bool]:
        fingerprint, count = item
        reference = coordinator is not None and dict(fingerprint) == prints.get(coordinator)
        return count, reference

    common = max(counts.items(), key=rank)[0]
    drifted = sorted(name for name, fp in prints.items() if tuple(sorted(fp.items())) != common)
    book.hold(
        Finding(
            rule=RuleName.CONFIG_DRIFT,
            key=DRIFT,
            type=EventType.CONFIG_DRIFT,
            severity=Severity.WARNING,
            display_name=f"Hosts disagree on {', '.join(differing)}",
            start_time=now,
            hosts=drifted,
            evidence=Evidence(facts={"differences": differing}),
        ),
        now,
    )

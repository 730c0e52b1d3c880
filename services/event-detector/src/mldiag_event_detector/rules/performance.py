"""Performance: duty-cycle drops, step-time (or throughput) regressions, and stragglers."""

from datetime import datetime

from mldiag_event_detector.book import EventBook, Finding
from mldiag_event_detector.state import HostState, mad, median
from mldiag_schemas.events import EventType, Evidence, MetricWindow, Severity
from mldiag_schemas.monitoring import DUTY_CYCLE_METRICS, STEP_TIME, THROUGHPUT, RuleName

DUTY = "duty-cycle-drop"
REGRESSION = "step-time-regression"


def duty_cycle_drop(book: EventBook, now: datetime) -> None:
    """The run's aggregated duty cycle fell by ``drop`` against its baseline."""
    if not book.policy.enabled(RuleName.DUTY_CYCLE_DROP):
        return
    rule = book.policy.thresholds(RuleName.DUTY_CYCLE_DROP)
    window = int(rule["windowSamples"])
    hosts = {
        name: host
        for name, host in book.state.hosts.items()
        if len(host.duty.baseline) >= rule["baselineSamples"] and len(host.duty.recent) >= window
    }
    if not hosts:
        return
    baseline = sum(median(h.duty.baseline) for h in hosts.values()) / len(hosts)
    if baseline <= 0:
        return
    floor = baseline * (1 - rule["drop"])
    # All of the last `window` samples low ⇔ their max is low; all high ⇔ their min is high.
    highest = sum(max(h.duty.recent[-window:]) for h in hosts.values()) / len(hosts)
    lowest = sum(min(h.duty.recent[-window:]) for h in hosts.values()) / len(hosts)
    current = sum(median(h.duty.recent[-window:]) for h in hosts.values()) / len(hosts)
    drop = 1 - current / baseline
    if highest <= floor:
        low_hosts = [
            name for name, h in hosts.items() if median(h.duty.recent[-window:]) <= floor
        ] or sorted(hosts)
        book.hold(
            Finding(
                rule=RuleName.DUTY_CYCLE_DROP,
                key=DUTY,
                type=EventType.PERFORMANCE_DEGRADATION,
                severity=Severity.WARNING,
                display_name=f"Accelerator duty cycle down {drop:.0%}"
                f" ({current:.1f}% vs a baseline of {baseline:.1f}%)",
                start_time=now,
                hosts=low_hosts,
                evidence=Evidence(
                    metric="/".join(DUTY_CYCLE_METRICS),
                    windows=[
                        MetricWindow(
                            metric="duty_cycle",
                            host=name,
                            observed=median(h.duty.recent[-window:]),
                            baseline=median(h.duty.baseline),
                            count=window,
                        )
                        for name, h in sorted(hosts.items())
                    ],
                    facts={"drop": drop, "baseline": baseline, "observed": current},
                ),
                time_lost_seconds=book.elapsed(DUTY, now) * max(drop, 0.0),
            ),
            now,
        )
    elif lowest > floor:
        book.clear(DUTY, now, book.elapsed(DUTY, now) * max(drop, 0.0))


def _regressed(host: HostState, rule: dict[str, float]) -> tuple[float, float] | None:
    """(recent median, baseline median) when the host's pace regressed, else None."""
    window = int(rule["windowSteps"])
    if len(host.pace.baseline) < rule["baselineSteps"] or len(host.pace.values) < window:
        return None
    base = median(host.pace.baseline)
    spread = mad(host.pace.baseline)
    recent = median(host.pace.values[-window:])
    if recent > base + rule["madFactor"] * spread and recent > base * (1 + rule["minIncrease"]):
        return recent, base
    return None


def step_time_regression(book: EventBook, now: datetime) -> None:
    """Without a duty cycle: most hosts' step time (or 1/throughput) regressed."""
    state = book.state
    if not book.policy.enabled(RuleName.STEP_TIME_REGRESSION) or any(
        host.duty.seen for host in state.hosts.values()
    ):
        return
    rule = book.policy.thresholds(RuleName.STEP_TIME_REGRESSION)
    judged = {
        name: _regressed(host, rule)
        for name, host in state.hosts.items()
        if len(host.pace.baseline) >= rule["baselineSteps"]
        and len(host.pace.values) >= rule["windowSteps"]
    }
    if not judged:
        return
    # A slowdown is judged as of the latest step: time with no step at all is a hang's (its
    # own rule), yet a hung process's system metrics keep arriving and would stretch the
    # last slow window into an ever longer, costlier slowdown.
    stepped = [progress for name in judged if (progress := state.hosts[name].last_progress_at)]
    if stepped:
        now = min(now, max(stepped))
    slow = {name: verdict for name, verdict in judged.items() if verdict is not None}
    # One slow host among healthy peers is a straggler, not the run slowing down.
    if len(slow) * 2 < len(judged) or (len(judged) > 1 and len(slow) == 1):
        if not slow or not book.is_open(REGRESSION):
            book.clear(REGRESSION, now)
        return
    if not slow:
        return
    throughput = any(state.hosts[name].pace_is_throughput for name in slow)
    increase = median([recent / base for recent, base in slow.values()]) - 1
    window = int(rule["windowSteps"])
    # Steps (1 + i) times longer lose i / (1 + i) of the wall time they take.
    lost = book.elapsed(REGRESSION, now) * increase / (1 + increase)
    metric = THROUGHPUT if throughput else STEP_TIME
    what = "Throughput down" if throughput else "Step time up"
    change = (1 - 1 / (1 + increase)) if throughput else increase
    book.hold(
        Finding(
            rule=RuleName.STEP_TIME_REGRESSION,
            key=REGRESSION,
            type=EventType.PERFORMANCE_DEGRADATION,
            severity=Severity.WARNING,
            display_name=f"{what} {change:.0%} against the run's baseline",
            start_time=now,
            hosts=sorted(slow),
            evidence=Evidence(
                metric=metric,
                windows=[
                    MetricWindow(
                        metric=metric,
                        host=name,
                        start_step=state.hosts[name].pace.steps[-window],
                        end_step=state.hosts[name].pace.steps[-1],
                        observed=_shown(recent, throughput),
                        baseline=_shown(base, throughput),
                        count=window,
                    )
                    for name, (recent, base) in sorted(slow.items())
                ],
                facts={"increase": increase, "throughput": throughput},
            ),
            time_lost_seconds=max(lost, 0.0),
        ),
        now,
    )


def _shown(pace: float, throughput: bool) -> float:
    return 1.0 / pace if throughput else pace


def straggler(book: EventBook, now: datetime, touched: set[str]) -> None:
    """A host whose step time sits well above its peers' over the same steps, for several
    windows in a row. Every complete window a batch brings is judged, in step order."""
    state = book.state
    if not book.policy.enabled(RuleName.STRAGGLER):
        return
    rule = book.policy.thresholds(RuleName.STRAGGLER)
    window = int(rule["windowSteps"])
    paced = {name: host for name, host in state.hosts.items() if len(host.pace.values) >= window}
    if len(paced) < 2:
        return
    by_step = {
        name: dict(zip(h.pace.steps, h.pace.values, strict=True)) for name, h in paced.items()
    }
    # The steps' own jitter within a window, pooled over hosts: with few peers, their spread
    # says little about what "slower" means.
    noise = median([mad(host.pace.values[-window:]) for host in paced.values()])
    for name in sorted(touched & set(paced)):
        host = paced[name]
        unjudged = min(host.pace.seen - host.straggler_checked_at, len(host.pace.values))
        for end in range(
            len(host.pace.values) - unjudged + window, len(host.pace.values) + 1, window
        ):
            steps = host.pace.steps[end - window : end]
            mine = median(host.pace.values[end - window : end])
            peers = [
                _peer_pace(by_step[other], steps, paced[other], window)
                for other in paced
                if other != name
            ]
            _judge_window(book, name, host, steps, mine, peers, noise, rule, now)
        host.straggler_checked_at = host.pace.seen - (unjudged % window)


def _peer_pace(values: dict[int, float], steps: list[int], peer: HostState, window: int) -> float:
    """A peer's median over the same steps; its latest window while it has not got there."""
    aligned = [values[step] for step in steps if step in values]
    return median(aligned) if len(aligned) * 2 >= len(steps) else median(peer.pace.values[-window:])


def _judge_window(
    book: EventBook,
    name: str,
    host: HostState,
    steps: list[int],
    mine: float,
    peers: list[float],
    noise: float,
    rule: dict[str, float],
    now: datetime,
) -> None:
    centre = median(peers)
    spread = max(mad(peers), noise)
    # Pace is seconds per step (1/throughput when only throughput is logged): higher is slower.
    slow = mine > centre * (1 + rule["minSlowdown"]) and mine > centre + rule["madFactor"] * spread
    host.straggler_streak = host.straggler_streak + 1 if slow else 0
    host.healthy_streak = 0 if slow else host.healthy_streak + 1
    key = f"straggler:{name}"
    if host.straggler_streak >= rule["windows"]:
        event = book.state.open_events.get(key)
        slowdown = mine / centre - 1
        book.hold(
            Finding(
                rule=RuleName.STRAGGLER,
                key=key,
                type=EventType.STRAGGLER,
                severity=Severity.WARNING,
                display_name=f"Host {name or '(unnamed)'} is {slowdown:.0%} slower"
                f" than its {len(peers)} peer(s)",
                start_time=now,
                hosts=[name],
                evidence=Evidence(
                    metric=THROUGHPUT if host.pace_is_throughput else STEP_TIME,
                    host=name,
                    first_bad_step=event.evidence.first_bad_step if event else steps[0],
                    windows=[
                        MetricWindow(
                            metric=STEP_TIME,
                            host=name,
                            start_step=steps[0],
                            end_step=steps[-1],
                            observed=mine,
                            baseline=centre,
                            count=len(steps),
                        )
                    ],
                    facts={"slowdown": slowdown, "peers": len(peers)},
                ),
                # Synchronous steps go at the slowest host's pace.
                time_lost_seconds=book.elapsed(key, now) * slowdown / (1 + slowdown),
            ),
            now,
        )
    elif host.healthy_streak >= rule["windows"]:
        # As many healthy windows to resolve as slow ones to open: no flapping.
        book.clear(key, now)

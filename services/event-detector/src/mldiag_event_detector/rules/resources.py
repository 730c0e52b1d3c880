"""Infrastructure resources: accelerator memory pressure and host memory exhaustion."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from mldiag_event_detector.book import EventBook, Finding
from mldiag_event_detector.state import Gauge, HostState
from mldiag_schemas.events import EventType, Evidence, MetricWindow, Severity
from mldiag_schemas.monitoring import ACCELERATOR_MEMORY_METRICS, HOST_MEMORY, RuleName


@dataclass(frozen=True)
class _Pressure:
    rule: RuleName
    event_type: EventType
    gauge: Callable[[HostState], Gauge]
    metric: str
    what: str


_RULES = (
    _Pressure(
        RuleName.ACCELERATOR_MEMORY,
        EventType.ACCELERATOR_MEMORY_PRESSURE,
        lambda host: host.accelerator_memory,
        "/".join(ACCELERATOR_MEMORY_METRICS),
        "Accelerator memory",
    ),
    _Pressure(
        RuleName.HOST_MEMORY,
        EventType.HOST_RESOURCE_EXHAUSTION,
        lambda host: host.host_memory,
        HOST_MEMORY,
        "Host memory",
    ),
)


def memory_pressure(book: EventBook, now: datetime) -> None:
    """Memory in use at or above the threshold for ``samples`` samples on some host."""
    for pressure in _RULES:
        if book.policy.enabled(pressure.rule):
            _judge(book, now, pressure)


def _judge(book: EventBook, now: datetime, pressure: _Pressure) -> None:
    rule = book.policy.thresholds(pressure.rule)
    samples, limit = int(rule["samples"]), rule["utilizationPercent"]
    gauges = {
        name: pressure.gauge(host)
        for name, host in book.state.hosts.items()
        if len(pressure.gauge(host).recent) >= samples
    }
    if not gauges:
        return
    full = {name: g for name, g in gauges.items() if min(g.recent[-samples:]) >= limit}
    key = pressure.rule.value
    if not full:
        if all(max(g.recent[-samples:]) < limit for g in gauges.values()):
            book.clear(key, now)
        return
    peak = max(max(g.recent[-samples:]) for g in full.values())
    book.hold(
        Finding(
            rule=pressure.rule,
            key=key,
            type=pressure.event_type,
            severity=Severity.CRITICAL if peak >= 99 else Severity.WARNING,
            display_name=f"{pressure.what} at {peak:.0f}% on {len(full)} host(s)"
            f" (threshold {limit:.0f}%)",
            start_time=now,
            hosts=sorted(full),
            evidence=Evidence(
                metric=pressure.metric,
                windows=[
                    MetricWindow(
                        metric=pressure.metric,
                        host=name,
                        observed=max(g.recent[-samples:]),
                        baseline=limit,
                        count=samples,
                    )
                    for name, g in sorted(full.items())
                ],
                facts={"peakPercent": peak, "thresholdPercent": limit},
            ),
        ),
        now,
    )

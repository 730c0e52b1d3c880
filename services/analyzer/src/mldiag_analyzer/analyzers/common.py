"""What every analyzer shares: its inputs, its finding, and how a finding becomes a report.

An analyzer is a pure function from :class:`Inputs` (the event and the run's signals when it
opened) to a :class:`Finding`; :class:`Analyzer` wraps it with a stable name, a layer and a
runbook so that every report names and links its cause the same way.
"""

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Literal

from pydantic import JsonValue

from mldiag_schemas.analyses import AnalyzerReport, DetectionState, Layer, RecommendedAction
from mldiag_schemas.events import EventType, HostSnapshot, RunContext, WorkloadEvent
from mldiag_schemas.monitoring import RULES, RuleName

HEARTBEAT_GRACE = 2.0
"""A host is silent once more than this many heartbeat intervals passed since its last one
(the same rule run-registry uses for ``overdue``)."""


@dataclass(frozen=True)
class Inputs:
    """What an analyzer looks at: the event and the run's signals when it opened (or when an
    update brought new evidence)."""

    event: WorkloadEvent
    context: RunContext | None

    @cached_property
    def hosts(self) -> list[HostSnapshot]:
        """Every host of the run the detector knew, by name (none without a context)."""
        return sorted(self.context.hosts, key=lambda h: h.host) if self.context else []

    @property
    def facts(self) -> dict[str, JsonValue]:
        """The rule's facts (exit code, signal, classification...)."""
        return self.event.evidence.facts

    @property
    def signals(self) -> list[str]:
        """Recent lifecycle signals in words, oldest first."""
        return self.context.signals if self.context else []

    @property
    def open_events(self) -> list[str]:
        """The run's other open events (``TYPE: display name``)."""
        return self.context.events if self.context else []

    def has_open_event(self, event_type: EventType) -> bool:
        """Whether another event of ``event_type`` is open on the run."""
        return any(line.startswith(f"{event_type}:") for line in self.open_events)

    def threshold(self, rule: RuleName, name: str) -> float:
        """A rule threshold: as applied to this run when the event came from that rule, else
        the documented default (so overrides of the run are honoured where we know them)."""
        if self.event.rule == rule and name in self.event.thresholds:
            return self.event.thresholds[name]
        return RULES[rule].thresholds[name].default

    def event_hosts(self) -> set[str]:
        """The hosts the event names, and the evidence's host."""
        named = set(self.event.hosts)
        if self.event.evidence.host:
            named.add(self.event.evidence.host)
        return named

    @cached_property
    def outliers(self) -> list["Outlier"]:
        """Hosts whose step time stands out from their peers (computed once per analysis)."""
        return step_outliers(self.hosts)

    def suspects(self) -> set[str]:
        """Hosts that stand out for this event: those it names when they are only some of the
        run's hosts, and the hosts whose step time stands out from their peers."""
        all_hosts = {h.host for h in self.hosts}
        named = self.event_hosts()
        singled_out = named if named and named < all_hosts else set()
        return singled_out | {outlier.host for outlier in self.outliers}


Spread = Literal["specific", "shared", "elsewhere", "run-wide"]
"""How a host-level finding lines up with the hosts an event singles out."""


def spread(inputs: Inputs, flagged: Iterable[str]) -> Spread:
    """``specific``: only on the hosts the event singles out (it explains them); ``shared``: on
    healthy peers too, so it does not explain why those hosts differ; ``elsewhere``: only on
    other hosts; ``run-wide``: the event singles out no host."""
    suspects = inputs.suspects()
    if not suspects:
        return "run-wide"
    found_on = set(flagged)
    if not found_on & suspects:
        return "elsewhere"
    return "shared" if found_on - suspects else "specific"


def not_specific(inputs: Inputs) -> str:
    """Details for a finding that healthy peers share."""
    suspects = sorted(inputs.suspects())
    verb = "is" if len(suspects) == 1 else "are"
    return (
        f"; healthy hosts show it too, so it does not explain why {names(suspects)} {verb} slower"
    )


@dataclass(frozen=True)
class Finding:
    """An analyzer's verdict before it becomes a report."""

    detected: bool
    details: str
    score: float = 0.0
    hosts: Sequence[str] = ()
    evidence: Sequence[str] = ()
    actions: Sequence[str] = ()


def found(
    details: str,
    score: float,
    hosts: Iterable[str] = (),
    evidence: Iterable[str] = (),
    actions: Iterable[str] = (),
) -> Finding:
    """A DETECTED finding; ``score`` is how probable this cause is (0..1)."""
    return Finding(
        True, details, min(max(score, 0.01), 1.0), sorted(set(hosts)), [*evidence], [*actions]
    )


def not_found(details: str, evidence: Iterable[str] = ()) -> Finding:
    """A NOT_DETECTED finding: ``details`` say what was checked."""
    return Finding(False, details, 0.0, (), [*evidence], ())


Check = Callable[[Inputs], Finding]
"""The body of an analyzer."""


@dataclass(frozen=True)
class Analyzer:
    """A named check of one cause, in one layer, with the runbook its actions link to."""

    name: str
    layer: Layer
    runbook: str
    """File name in docs/runbooks/, e.g. ``thermal-throttling.md``."""
    check: Check

    def run(self, inputs: Inputs, runbook_base_url: str) -> AnalyzerReport:
        """Check the cause and report the verdict."""
        finding = self.check(inputs)
        url = runbook_base_url + self.runbook
        return AnalyzerReport(
            analyzer=self.name,
            layer=self.layer,
            detection_state=(
                DetectionState.DETECTED if finding.detected else DetectionState.NOT_DETECTED
            ),
            details=finding.details,
            hosts=list(finding.hosts),
            evidence=list(finding.evidence),
            score=finding.score,
            recommended_actions=[
                RecommendedAction(description=action, documentation_url=url)
                for action in finding.actions
            ],
        )


def analyzer(name: str, layer: Layer, runbook: str) -> Callable[[Check], Analyzer]:
    """Declare a check as an analyzer: ``@analyzer("thermal-throttling", Layer..., "x.md")``."""

    def declare(check: Check) -> Analyzer:
        return Analyzer(name, layer, runbook, check)

    return declare


# --- shared readings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Outlier:
    """A host whose step time stands out from the median of its peers."""

    host: str
    step_time: float
    peers_median: float

    @property
    def slowdown(self) -> float:
        """How much slower than its peers (0.4 = 40% slower)."""
        return self.step_time / self.peers_median - 1.0


def _median_without(ordered: Sequence[float], index: int) -> float:
    """The median of the sorted ``ordered`` without its element at ``index`` (in O(1))."""
    size = len(ordered) - 1

    def at(k: int) -> float:
        return ordered[k if k < index else k + 1]

    if size % 2:
        return at(size // 2)
    return (at(size // 2 - 1) + at(size // 2)) / 2


def step_outliers(hosts: Sequence[HostSnapshot]) -> list[Outlier]:
    """Hosts slower than their peers' median by the straggler rule's defaults (``madFactor``
    MADs of the peers and at least ``minSlowdown``); slowest first. Needs two hosts with step
    times.

    Exact and O(n log n), so that runs of thousands of hosts stay fast: a host's peers are the
    sorted step times without it, whose median is found by index; the peers' deviations from
    that median are sorted once per distinct median (there are at most three).
    """
    spec = RULES[RuleName.STRAGGLER].thresholds
    mad_factor, min_slowdown = spec["madFactor"].default, spec["minSlowdown"].default
    timed = sorted(
        (h.step_time, h.host) for h in hosts if h.step_time is not None and h.step_time > 0
    )
    if len(timed) < 2:
        return []
    ordered = [step_time for step_time, _ in timed]
    deviations: dict[float, list[float]] = {}
    outliers = []
    for index, (step_time, host) in enumerate(timed):
        median = _median_without(ordered, index)
        if step_time < median * (1 + min_slowdown):
            continue
        if median not in deviations:
            deviations[median] = sorted(abs(t - median) for t in ordered)
        spread = deviations[median]
        mad = _median_without(spread, bisect.bisect_left(spread, abs(step_time - median)))
        if step_time > median + mad_factor * mad:
            outliers.append(Outlier(host, step_time, median))
    return sorted(outliers, key=lambda o: o.slowdown, reverse=True)


def silent_hosts(inputs: Inputs) -> list[HostSnapshot]:
    """Hosts whose heartbeats stopped (more than ``HEARTBEAT_GRACE`` intervals late when the
    snapshot was taken) and that make no progress either, the first to fall silent first.

    A host still recording steps is alive whatever its heartbeats say: a restarted process
    records steps before its first heartbeat is in, and calling it dead would contradict the
    restart the event is about."""
    if inputs.context is None:
        return []
    now = inputs.context.captured_at

    def late(when: datetime | None, interval: float) -> bool:
        return when is None or (now - when).total_seconds() > HEARTBEAT_GRACE * interval

    silent = [
        h
        for h in inputs.hosts
        if h.last_heartbeat_time is not None
        and h.heartbeat_interval_seconds is not None
        and late(h.last_heartbeat_time, h.heartbeat_interval_seconds)
        and late(h.last_progress_time, h.heartbeat_interval_seconds)
    ]
    return sorted(silent, key=lambda h: h.last_heartbeat_time or now)


def beating_hosts(inputs: Inputs) -> list[HostSnapshot]:
    """Hosts whose heartbeats were still arriving when the snapshot was taken."""
    silent = {h.host for h in silent_hosts(inputs)}
    return [h for h in inputs.hosts if h.last_heartbeat_time is not None and h.host not in silent]


def fact_text(inputs: Inputs, key: str) -> str:
    """A fact as text (empty when absent or null)."""
    value = inputs.facts.get(key)
    return "" if value is None else str(value)


def fact_number(inputs: Inputs, key: str) -> float | None:
    """A numeric fact, if there is one."""
    value = inputs.facts.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def exit_code_fact(inputs: Inputs) -> int | None:
    """The ``exitCode`` fact as an integer, if there is one."""
    value = fact_number(inputs, "exitCode")
    return None if value is None else int(value)


def onset_step(inputs: Inputs) -> int | None:
    """The step the event started at: its first bad step, else the earliest window start,
    else (for a hang) the lowest last step of any host."""
    evidence = inputs.event.evidence
    if evidence.first_bad_step is not None:
        return evidence.first_bad_step
    starts = [w.start_step for w in evidence.windows if w.start_step is not None]
    if starts:
        return min(starts)
    steps = [h.last_step for h in inputs.hosts if h.last_step is not None]
    return min(steps) if steps else None


def names(hosts: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``; ``no host`` for none."""
    items = sorted(set(hosts))
    if not items:
        return "no host"
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def on(hosts: Iterable[str]) -> str:
    """`` on a and b`` for the hosts concerned; empty when none are known."""
    items = set(hosts)
    return f" on {names(items)}" if items else ""


def of_hosts(some: int, total: int) -> str:
    """``1 of 4 hosts``."""
    return f"{some} of {total} host{'s' if total != 1 else ''}"


def when(moment: datetime) -> str:
    """A time for people (UTC, to the second)."""
    return moment.strftime("%H:%M:%S UTC")


def percent(value: float) -> str:
    """``87%`` for a percentage (0..100)."""
    return f"{value:.0f}%"


def share(value: float) -> str:
    """``32%`` for a fraction (0..1)."""
    return f"{value * 100:.0f}%"


def seconds(value: float) -> str:
    """``1.25 s``."""
    return f"{value:.3g} s"


NO_CONTEXT = "No run context came with the event, so {what} could not be checked."
"""Details of an analyzer whose signals only the context carries."""

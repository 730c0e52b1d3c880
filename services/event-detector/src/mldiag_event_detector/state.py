"""What the detector remembers about one run between messages, and robust statistics.

The whole state of a run is one small document (bounded windows, not histories): it is read
and written with the run's row lock held, in the transaction that applies its messages, so a
restart or another replica continues exactly where the last commit left off.
"""

import statistics
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from mldiag_schemas.events import WorkloadEvent
from mldiag_schemas.monitoring import MonitoringRules

CONTENTION_WINDOW = 48
"""Recent samples kept per contention signal and host (sampled about every second: enough
to cover a slowdown from its start to the moment it becomes material)."""

CONTENTION_WARMUP = 2
"""Contention samples ignored at a host's start (the run's own start-up)."""

CONTENTION_BASELINE = 10
"""Contention samples whose median is a baseline: the last ones before a deviation began,
else the first ones after warm-up."""

PRE_DEVIATION_GAP_SECONDS = 2.0
"""Samples received this close before a deviation began may already cover it (a sample
describes the interval that ends when it is taken, and arrives a little later): they are
left out of the baseline before it."""

PRE_DEVIATION_MIN_SAMPLES = 3
"""Fewer samples than this before a deviation: its baseline is the run's first samples."""

TOP_PROCESSES = 8
"""Other processes remembered per host (the latest sampled)."""

PROCESS_SLACK_SECONDS = 5.0
"""Top processes sampled this long before a deviation began still count for it (the sample
taken just as it began)."""

TOP_PROCESS_STALE_SECONDS = 30.0
"""A process not sampled for this long (against the host's latest sample) is forgotten."""

MAX_EXCERPTS = 8
"""Log excerpts kept per run, newest first to stay."""

MAX_EXCERPT_LINES = 40
"""Lines quoted per excerpt."""

MAX_EXCERPT_LINE_CHARS = 1000
"""Characters quoted per line (a line may hold 16 KiB; the state must stay small)."""

WINDOW = 64
"""Recent values kept per signal and host: enough for every default window."""

MAD_TO_SIGMA = 1.4826
"""MAD x this estimates the standard deviation of normally distributed data."""


def median(values: Sequence[float]) -> float:
    """The median (``values`` must not be empty)."""
    return statistics.median(values)


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median."""
    centre = statistics.median(values)
    return statistics.median(abs(value - centre) for value in values)


def push(window: list[float], value: float, limit: int = WINDOW) -> None:
    """Append, keeping the last ``limit`` values."""
    window.append(value)
    if len(window) > limit:
        del window[: len(window) - limit]


class State(BaseModel):
    """Base of the state documents: mutable, strict about unknown fields."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Gauge(State):
    """Samples of a gauge (duty cycle, memory %) on one host, with its baseline."""

    recent: list[float] = Field(default_factory=list)
    seen: int = 0
    baseline: list[float] = Field(default_factory=list)


class StepSeries(State):
    """Per-step values (step time, data wait) on one host."""

    steps: list[int] = Field(default_factory=list)
    values: list[float] = Field(default_factory=list)
    seen: int = 0
    baseline: list[float] = Field(default_factory=list)

    def add(self, step: int, value: float) -> None:
        """Record one step's value."""
        self.steps.append(step)
        self.values.append(value)
        self.seen += 1
        if len(self.steps) > WINDOW:
            del self.steps[:-WINDOW]
            del self.values[:-WINDOW]

    def at(self, step: int) -> float | None:
        """The value recorded at ``step``, if still in the window."""
        for index in range(len(self.steps) - 1, -1, -1):
            if self.steps[index] == step:
                return self.values[index]
        return None


class TimedSeries(State):
    """A sampled contention signal on one host: recent values with when they were received
    (the server's clock, like the rules' ``now``), and its baseline."""

    times: list[float] = Field(default_factory=list)
    """Unix seconds."""
    values: list[float] = Field(default_factory=list)
    seen: int = 0
    baseline: list[float] = Field(default_factory=list)

    def add(self, at: float, value: float) -> None:
        """Record one sample (the baseline takes the first ones after warm-up)."""
        if CONTENTION_WARMUP <= self.seen < CONTENTION_WARMUP + CONTENTION_BASELINE:
            self.baseline.append(value)
        self.seen += 1
        self.times.append(at)
        self.values.append(value)
        if len(self.values) > CONTENTION_WINDOW:
            del self.times[:-CONTENTION_WINDOW]
            del self.values[:-CONTENTION_WINDOW]

    def since(self, at: float) -> list[float]:
        """The values received at or after ``at`` (unix seconds)."""
        return [value for time, value in zip(self.times, self.values, strict=True) if time >= at]

    def baseline_before(self, at: float) -> list[float]:
        """What was normal just before ``at`` (a deviation's start, unix seconds): the last
        :data:`CONTENTION_BASELINE` values received before it (less the gap a sample may
        overlap it by), or the run's first samples when too few came before it.

        The step time's baseline is the healthy stretch before a slowdown; comparing contention
        with the same stretch asks what changed when the steps slowed, which the run's first
        seconds cannot answer when load was already there (or came and went) back then."""
        cutoff = at - PRE_DEVIATION_GAP_SECONDS
        before = [
            value for time, value in zip(self.times, self.values, strict=True) if time < cutoff
        ]
        if len(before) >= PRE_DEVIATION_MIN_SAMPLES:
            return before[-CONTENTION_BASELINE:]
        return self.baseline


class OtherProcess(State):
    """One of the top other processes of a host, as last sampled."""

    name: str
    at: float
    """Unix seconds of its latest sample."""
    cpu_percent: float | None = None
    memory_percent: float | None = None


class HostContention(State):
    """Contention signals of one host (only those the host samples)."""

    series: dict[str, TimedSeries] = Field(default_factory=dict)
    """By metric name (``host_cpu_user_percent`` …)."""
    processes: dict[str, OtherProcess] = Field(default_factory=dict)
    """By pid."""
    cpu_count: int | None = None
    """The host's logical CPUs, as last sampled."""
    ecc_first: float | None = None
    """Uncorrected ECC errors (summed over devices) at the host's first sample."""
    xids: list[int] = Field(default_factory=list)
    """XID codes reported, the latest few (distinct)."""
    throttle_mask: int = 0
    """The latest throttle-reasons bit mask, OR-ed over devices."""

    def processes_since(self, at: float) -> bool:
        """Whether some other process was sampled at or after ``at`` (unix seconds)."""
        return any(process.at >= at for process in self.processes.values())

    def signal(self, metric: str) -> TimedSeries:
        """The series of ``metric``, created on first sample."""
        series = self.series.get(metric)
        if series is None:
            series = self.series[metric] = TimedSeries()
        return series


class Heartbeat(State):
    """The latest heartbeat of one process."""

    pid: int = 0
    received_at: datetime
    interval_seconds: float
    step: int | None = None


class HostState(State):
    """One host of a run."""

    last_step: int | None = None
    last_progress_at: datetime | None = None
    progress_gaps: list[float] = Field(default_factory=list)
    """Seconds between successive new steps (the typical step when no step time is logged)."""
    paced_step: int | None = None
    """Highest step with a step time (or throughput): a lower one again is a restart."""
    pace: StepSeries = Field(default_factory=StepSeries)
    """Step time, or 1/throughput when only throughput is logged."""
    pace_is_throughput: bool = False
    data_wait: StepSeries = Field(default_factory=StepSeries)
    duty: Gauge = Field(default_factory=Gauge)
    accelerator_memory: Gauge = Field(default_factory=Gauge)
    host_memory: Gauge = Field(default_factory=Gauge)
    host_cpu: Gauge = Field(default_factory=Gauge)
    contention: HostContention = Field(default_factory=HostContention)
    temperature: Gauge = Field(default_factory=Gauge)
    sm_clock: Gauge = Field(default_factory=Gauge)
    throttled: bool = False
    straggler_streak: int = 0
    healthy_streak: int = 0
    straggler_checked_at: int = 0
    heartbeats: dict[str, Heartbeat] = Field(default_factory=dict)
    """By process index."""
    fingerprint: dict[str, str] = Field(default_factory=dict)
    restarts: int = 0
    pids: dict[str, datetime] = Field(default_factory=dict)
    """A job's replica: its processes (pid → first heard), the last few."""
    gone_pids: list[int] = Field(default_factory=list)
    """A job's replica: processes of attempts the job has replaced."""
    new_process_at: datetime | None = None
    """A restart seen as a new process, not yet seen again as a step recorded twice."""
    step_again_at: datetime | None = None
    """A restart seen as a step recorded twice, not yet seen again as a new process."""


class SeriesWatch(State):
    """A numeric series watched for non-finite values and spikes (per metric and host)."""

    last_good_step: int | None = None
    last_good_value: float | None = None
    recent: list[float] = Field(default_factory=list)
    finite_since_bad: int = 0
    calm_since_spike: int = 0
    """Values in a row back within bounds since the last spike of an open spike event."""


class Compile(State):
    """One compilation after warm-up."""

    at: datetime
    step: int
    seconds: float


class Deviation(State):
    """A slowdown rule's condition, from when it began to hold until it has stayed clear
    long enough to be over."""

    rule: str
    start: datetime
    cleared_at: datetime | None = None
    """Since when the condition has been clear (None while it holds)."""
    gap_seconds: float = 0.0
    """Time clear between ``start`` and the latest relapse: not counted as time lost."""
    named_processes: bool = False
    """Whether its event's announced context named other processes on its hosts (they are
    sampled only while a host is busy, so they often come just after the event opened)."""

    def held_seconds(self, now: datetime) -> float:
        """How long the condition has held since it began (clear spells left out)."""
        until = self.cleared_at or now
        return max((until - self.start).total_seconds() - self.gap_seconds, 0.0)


class Excerpt(State):
    """Telling log lines of one process (a traceback, an OOM message, …), as kept."""

    kind: str
    host: str = ""
    pid: int | None = None
    time: datetime
    last_time: datetime
    lines: list[str] = Field(default_factory=list)
    open: bool = False
    """A traceback still being read (its exception line has not come yet)."""


class RunState(State):
    """Everything the rules need about one run."""

    run_id: str
    project: str = ""
    location: str = ""
    phase: str = "ACTIVE"
    ended_at: datetime | None = None
    """When the run last ended (its phase left ACTIVE)."""
    ended_keys: list[str] = Field(default_factory=list)
    """Rule keys whose events the run's end resolved: late telemetry must not reopen them."""
    first_seen_at: datetime | None = None
    """Server time of the run's first message."""
    first_point_at: datetime | None = None
    """The earliest point time of the run's first metric message (the workload's clock)."""
    rules: MonitoringRules = Field(default_factory=MonitoringRules)
    """The run's own overrides (from its run messages)."""
    hosts: dict[str, HostState] = Field(default_factory=dict)
    series: dict[str, SeriesWatch] = Field(default_factory=dict)
    """Key ``metric|host``."""
    compiles: list[Compile] = Field(default_factory=list)
    compile_seconds: float = 0.0
    last_checkpoint_at: datetime | None = None
    checkpoint_fraction: float | None = None
    signals: list[str] = Field(default_factory=list)
    config_changes: list[str] = Field(default_factory=list)
    open_events: dict[str, WorkloadEvent] = Field(default_factory=dict)
    """By rule key (``hang``, ``straggler:host-3``, ``loss-spike:loss|h0`` …)."""
    occurrences: dict[str, int] = Field(default_factory=dict)
    """How many events each rule key has opened (part of the next one's id)."""
    deviations: dict[str, Deviation] = Field(default_factory=dict)
    """Slowdowns by rule key: pending (not yet material, no open event) or open."""
    recent_events: list[WorkloadEvent] = Field(default_factory=list)
    """Events resolved in the last minutes (evidence arriving late still reaches them)."""
    excerpts: list[Excerpt] = Field(default_factory=list)
    """Telling log lines, oldest first (at most :data:`MAX_EXCERPTS`)."""
    incarnation: int = 0
    """Bumped when an ended run becomes active again."""
    max_step_before_restart: int | None = None
    job: str = ""
    """The training job that runs this run (its resource name, from the run's custom
    workload); empty for other runs. A job restarts its replicas and ends its run itself, so
    a replica going down is not the run's end: see ``liveness``."""
    downs: dict[str, dict[str, JsonValue]] = Field(default_factory=dict)
    """Replicas of a job's run that went down and have not come back, by host: why (the
    most telling reason) and when (``at``)."""

    def host(self, name: str) -> HostState:
        """The host's state, created on first sight."""
        state = self.hosts.get(name)
        if state is None:
            state = self.hosts[name] = HostState()
        return state

    def baseline_step_seconds(self) -> float | None:
        """The run's step time before anything went wrong: the median of its hosts' baseline
        step times, else the typical step (materiality scales with it, and a slowdown must
        not stretch its own yardstick)."""
        bases = [
            median(host.pace.baseline)
            for host in self.hosts.values()
            if host.pace.baseline and not host.pace_is_throughput
        ]
        return median(bases) if bases else self.typical_step_seconds()

    def typical_step_seconds(self) -> float | None:
        """The run's typical step: median logged step time, else median gap between steps."""
        paces = [
            median(host.pace.values)
            for host in self.hosts.values()
            if host.pace.values and not host.pace_is_throughput
        ]
        if paces:
            return median(paces)
        gaps = [gap for host in self.hosts.values() for gap in host.progress_gaps]
        return median(gaps) if gaps else None

    def note(self, line: str) -> None:
        """Remember a lifecycle signal in words (the last 20)."""
        self.signals.append(line)
        del self.signals[:-20]

    @property
    def active(self) -> bool:
        """Whether the run has not ended."""
        return self.phase == "ACTIVE"

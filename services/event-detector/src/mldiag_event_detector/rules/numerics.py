"""Model numerics: NaN/±Inf in any metric, and loss spikes (robust, over a window)."""

import math
from datetime import UTC, datetime, timedelta

from mldiag_event_detector.book import EventBook, Finding
from mldiag_event_detector.state import MAD_TO_SIGMA, SeriesWatch, mad, median, push
from mldiag_schemas.events import EventType, Evidence, MetricWindow, Severity
from mldiag_schemas.monitoring import RuleName
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived

RECOVERED_AFTER = 10
"""Finite values in a row after which a non-finite event is resolved, and values in a row
back within bounds after which a loss spike is: a loss that spikes again sooner (a learning
rate too high makes it swing) is the same instability, one event, not one per swing."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def is_loss(name: str) -> bool:
    """Whether a metric is a loss the spike rule watches."""
    return name == "loss" or name.endswith(("_loss", "/loss", ".loss"))


def _describe(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def observe(book: EventBook, message: MetricPointsReceived) -> None:
    """Watch every series for non-finite values and every loss for spikes."""
    non_finite = book.policy.enabled(RuleName.NON_FINITE)
    spikes = book.policy.enabled(RuleName.LOSS_SPIKE)
    for columns in message.series:
        if not columns.steps:
            continue
        loss = spikes and is_loss(columns.name)
        if not loss and all(map(math.isfinite, columns.values)):
            if non_finite:
                _last_good(book, columns, message.occurred_at)
            continue
        _points(book, columns, message.occurred_at, non_finite=non_finite, loss=loss)


def _watch(book: EventBook, columns: MetricColumns) -> tuple[str, SeriesWatch]:
    key = f"{columns.name}|{columns.host}"
    watch = book.state.series.get(key)
    if watch is None:
        watch = book.state.series[key] = SeriesWatch()
    return key, watch


def _last_good(book: EventBook, columns: MetricColumns, now: datetime) -> None:
    """The common case: only the highest step of the series can move "last good"."""
    key, watch = _watch(book, columns)
    top = max(columns.steps)
    if watch.last_good_step is None or top >= watch.last_good_step:
        at = len(columns.steps) - 1 - columns.steps[::-1].index(top)
        watch.last_good_step, watch.last_good_value = top, columns.values[at]
    _recovering(book, key, watch, len(columns.steps), now)


def _recovering(book: EventBook, key: str, watch: SeriesWatch, finite: int, now: datetime) -> None:
    if f"non-finite:{key}" not in book.state.open_events:
        return
    watch.finite_since_bad += finite
    if watch.finite_since_bad >= RECOVERED_AFTER:
        book.clear(f"non-finite:{key}", now, facts={"recoveredAtStep": watch.last_good_step})


def _points(
    book: EventBook, columns: MetricColumns, now: datetime, *, non_finite: bool, loss: bool
) -> None:
    """Point by point, in step order, so "last good" means "before it"."""
    key, watch = _watch(book, columns)
    spike = book.policy.thresholds(RuleName.LOSS_SPIKE)
    times = columns.times_unix_us
    order = sorted(range(len(columns.steps)), key=columns.steps.__getitem__)
    for index in order:
        step, value = columns.steps[index], columns.values[index]
        at = now if times is None else _EPOCH + timedelta(microseconds=times[index])
        if not math.isfinite(value):
            if non_finite and f"non-finite:{key}" not in book.state.open_events:
                book.hold(_non_finite(columns, watch, step, value, at), now)
            watch.finite_since_bad = 0
            continue
        # A point older than the newest good one came late (a batch redelivered after a
        # failure, or a replica that folded after another): measured against the newer
        # window, an earlier and higher loss would read as a spike.
        late = watch.last_good_step is not None and step <= watch.last_good_step
        if loss and not late:
            _judge_loss(book, key, columns, watch, step, value, at, now, spike)
        if watch.last_good_step is None or step >= watch.last_good_step:
            watch.last_good_step, watch.last_good_value = step, value
        _recovering(book, key, watch, 1, now)


def _non_finite(
    columns: MetricColumns, watch: SeriesWatch, step: int, value: float, at: datetime
) -> Finding:
    where = f" on host {columns.host}" if columns.host else ""
    return Finding(
        rule=RuleName.NON_FINITE,
        key=f"non-finite:{columns.name}|{columns.host}",
        type=EventType.NUMERICAL_INSTABILITY,
        severity=Severity.CRITICAL,
        display_name=f"{columns.name} became {_describe(value)} at step {step}{where}",
        start_time=at,
        hosts=[columns.host] if columns.host else [],
        evidence=Evidence(
            metric=columns.name,
            host=columns.host,
            first_bad_step=step,
            first_bad_value=value,
            last_good_step=watch.last_good_step,
            last_good_value=watch.last_good_value,
            facts={"kind": "non_finite"},
        ),
    )


def _judge_loss(
    book: EventBook,
    key: str,
    columns: MetricColumns,
    watch: SeriesWatch,
    step: int,
    value: float,
    at: datetime,
    now: datetime,
    spike: dict[str, float],
) -> None:
    window = watch.recent[-int(spike["windowSteps"]) :]
    spike_key = f"loss-spike:{key}"
    if len(window) < spike["warmupSteps"]:
        push(watch.recent, value)
        return
    centre = median(window)
    spread = mad(window) * MAD_TO_SIGMA
    z = (value - centre) / spread if spread > 0 else 0.0
    ratio = value / centre if centre > 0 else 0.0
    if ratio > spike["factor"] or z > spike["zScore"]:
        watch.calm_since_spike = 0
        if spike_key not in book.state.open_events:
            where = f" on host {columns.host}" if columns.host else ""
            book.hold(
                Finding(
                    rule=RuleName.LOSS_SPIKE,
                    key=spike_key,
                    type=EventType.NUMERICAL_INSTABILITY,
                    severity=Severity.WARNING,
                    display_name=f"{columns.name} spiked to {value:.4g} at step {step}{where}"
                    f" ({ratio:.1f}x its running median {centre:.4g})",
                    start_time=at,
                    hosts=[columns.host] if columns.host else [],
                    evidence=Evidence(
                        metric=columns.name,
                        host=columns.host,
                        first_bad_step=step,
                        first_bad_value=value,
                        last_good_step=watch.last_good_step,
                        last_good_value=watch.last_good_value,
                        windows=[
                            MetricWindow(
                                metric=columns.name,
                                host=columns.host,
                                observed=value,
                                baseline=centre,
                                count=len(window),
                            )
                        ],
                        facts={"kind": "loss_spike", "ratio": ratio, "robustZ": z},
                    ),
                ),
                now,
            )
        return  # a spike never enters the window it is judged against
    if spike_key in book.state.open_events:
        watch.calm_since_spike += 1
        if watch.calm_since_spike >= RECOVERED_AFTER:
            book.clear(spike_key, now, facts={"recoveredAtStep": step})
    push(watch.recent, value)

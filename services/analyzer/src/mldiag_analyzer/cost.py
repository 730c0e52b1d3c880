"""Time lost to an event (badput), as the analysis counts it.

The detector counts each event's ``time_lost_seconds`` as it goes; the analysis reports that
count, or its own estimate from the evidence when that is larger (the detector may not have
counted yet when the event opens):

- a slowdown (performance degradation, straggler): the extra time of the slow window, i.e.
  (observed - baseline step time) x steps in the window; for a duty-cycle drop, the window's
  duration x the relative drop. In a synchronous job every host waits for the slowest, so
  the worst window counts once, never the sum over hosts;
- a hang: the time since the run last made progress (the latest ``last_progress_time`` of
  any host) until the context was captured.

Other events keep the detector's count.
"""

from mldiag_schemas.events import EventType, MetricWindow, RunContext, WorkloadEvent
from mldiag_schemas.monitoring import DUTY_CYCLE_METRICS, STEP_TIME

_DUTY_CYCLES = {*DUTY_CYCLE_METRICS, "duty_cycle"}


def _window_loss(window: MetricWindow) -> float:
    observed, baseline = window.observed, window.baseline
    if observed is None or baseline is None or baseline <= 0:
        return 0.0
    if window.metric == STEP_TIME and observed > baseline:
        if window.start_step is not None and window.end_step is not None:
            steps = window.end_step - window.start_step + 1
        else:
            steps = window.count
        return (observed - baseline) * max(steps, 0)
    if window.metric in _DUTY_CYCLES and observed < baseline:
        if window.start_time is None or window.end_time is None:
            return 0.0
        duration = (window.end_time - window.start_time).total_seconds()
        return max(duration, 0.0) * (baseline - observed) / baseline
    return 0.0


def estimate_time_lost(event: WorkloadEvent, context: RunContext | None) -> float:
    """The analysis's own estimate of the time lost so far (0 when it has none)."""
    if event.type in (EventType.PERFORMANCE_DEGRADATION, EventType.STRAGGLER):
        return max((_window_loss(w) for w in event.evidence.windows), default=0.0)
    if event.type == EventType.HANG and context is not None:
        progress = [h.last_progress_time for h in context.hosts if h.last_progress_time]
        if progress:
            return max((context.captured_at - max(progress)).total_seconds(), 0.0)
    return 0.0


def time_lost_seconds(event: WorkloadEvent, context: RunContext | None) -> float:
    """The detector's count, or the analysis's estimate where that is larger."""
    return max(event.time_lost_seconds, estimate_time_lost(event, context))

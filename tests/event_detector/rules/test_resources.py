"""Resources: accelerator memory pressure and host memory exhaustion, by host."""

import uuid

from event_detector.feed import Feed
from mldiag_schemas.events import EventType, Severity
from mldiag_schemas.telemetry import MetricColumns, MetricPointsReceived


def test_accelerator_memory_above_95_percent_on_one_device_opens_for_its_host() -> None:
    feed = Feed()
    for step in range(1, 4):
        feed.step(step, h0={"hbm_utilization": [60.0, 97.0]}, h1={"hbm_utilization": [60.0, 61.0]})
    [event] = feed.opened()
    assert event.type is EventType.ACCELERATOR_MEMORY_PRESSURE
    assert event.hosts == ["h0"]
    assert event.severity is Severity.WARNING
    for step in range(4, 6):
        feed.step(step, h0={"hbm_utilization": [60.0, 70.0]})
    assert feed.is_resolved(event)


def test_one_high_sample_is_not_pressure() -> None:
    feed = Feed()
    feed.step(1, h0={"vram_utilization": 99.0})
    feed.step(2, h0={"vram_utilization": 50.0})
    feed.step(3, h0={"vram_utilization": 99.0})
    assert feed.opened() == []


def test_host_memory_exhaustion() -> None:
    feed = Feed()
    for step in range(1, 4):
        feed.step(step, h0={"host_memory_utilization": 93.0, "host_cpu_utilization": 50.0})
    [event] = feed.opened()
    assert event.type is EventType.HOST_RESOURCE_EXHAUSTION
    assert event.hosts == ["h0"]


def test_points_without_times_are_samples_by_step() -> None:
    # A plain HTTP write may leave times out: its steps are still separate samples.
    feed = Feed()
    untimed = MetricColumns(name="hbm_utilization", host="h0", steps=[20, 21], values=[98.0, 98.5])
    feed.send(
        MetricPointsReceived(
            run_id=feed.run_id,
            batch_id=uuid.uuid4(),
            chunk=0,
            occurred_at=feed.now,
            series=[untimed],
        )
    )
    [event] = feed.opened()
    assert event.type is EventType.ACCELERATOR_MEMORY_PRESSURE

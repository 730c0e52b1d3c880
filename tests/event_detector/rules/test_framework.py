"""Framework: recompilation storms, input stalls, checkpoint stalls and config drift."""

from event_detector.feed import Feed, immediate
from mldiag_schemas.events import EventType


def test_compilations_during_warm_up_are_fine_but_a_storm_after_it_opens() -> None:
    feed = Feed()
    for step in range(1, 6):
        feed.step(step, h0={"compile_time": 2.0, "step_time": 1.0})
    assert feed.opened() == []
    for step in range(6, 10):
        feed.advance(5)
        feed.step(step, h0={"compile_time": 1.5, "step_time": 1.0})
    [event] = feed.opened()
    assert event.type is EventType.RECOMPILATION_STORM
    assert event.evidence.facts["compiles"] == 4
    assert event.time_lost_seconds == 6.0


def test_a_few_compilations_after_warm_up_are_not_a_storm() -> None:
    feed = Feed()
    for step in range(6, 9):
        feed.advance(5)
        feed.step(step, h0={"compile_time": 1.0})
    assert feed.opened() == []


def test_data_wait_over_fifteen_percent_of_the_step_is_an_input_stall() -> None:
    feed = Feed(project_rules=immediate())
    for step in range(1, 8):
        feed.advance(1)
        feed.step(step, h0={"step_time": 1.0, "data_wait_time": 0.02})
    assert feed.opened() == []
    for step in range(8, 16):
        feed.advance(1)
        feed.step(
            step,
            h0={"step_time": 1.0, "data_wait_time": 0.4},
            h1={"step_time": 1.0, "data_wait_time": 0.01},
        )
    [event] = feed.opened()
    assert event.type is EventType.INPUT_STALL
    assert event.hosts == ["h0"]


def test_a_checkpoint_blocking_more_than_five_percent_of_its_interval_is_a_stall() -> None:
    feed = Feed()
    feed.step(1, h0={"step_time": 1.0})
    feed.advance(100)
    feed.step(100, h0={"checkpoint_time": 2.0})  # 2% of 100 s: fine
    feed.advance(100)
    feed.step(200, h0={"checkpoint_time": 12.0})  # 12%
    [event] = feed.opened()
    assert event.type is EventType.CHECKPOINT_STALL
    assert event.time_lost_seconds == 12.0
    feed.advance(100)
    feed.step(300, h0={"checkpoint_time": 1.0})
    assert feed.is_resolved(event)


def test_hosts_with_different_fingerprints_are_config_drift() -> None:
    feed = Feed()
    feed.send(
        feed.heartbeat("h0", jax="0.4.30", packages="aa"),
        feed.heartbeat("h1", jax="0.4.30", packages="aa"),
        feed.heartbeat("h2", jax="0.4.31", packages="aa"),
    )
    [event] = feed.opened()
    assert event.type is EventType.CONFIG_DRIFT
    assert event.hosts == ["h2"]
    assert event.evidence.facts["differences"] == {
        "jax": {"h0": "0.4.30", "h1": "0.4.30", "h2": "0.4.31"}
    }
    feed.send(feed.heartbeat("h2", jax="0.4.30", packages="aa"))
    assert feed.is_resolved(event)


def test_identical_fingerprints_are_quiet() -> None:
    feed = Feed()
    feed.send(*(feed.heartbeat(f"h{i}", jax="0.4.30") for i in range(4)))
    assert feed.opened() == []

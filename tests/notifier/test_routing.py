"""Which rules an event matches, delivery ids, and the wait between attempts."""

import uuid

import pytest

from mldiag_notifier.routing import (
    RunFacts,
    backoff_seconds,
    delivery_id,
    group_delivery_id,
    matches,
)
from mldiag_schemas.alerts import AlertRule, NotificationKind
from mldiag_schemas.events import EventType, Severity
from notifier.conftest import make_event

RUN = RunFacts("r1", "default", "local", run_set="nightly", labels={"team": "a", "tier": "1"})


def rule(**fields: object) -> AlertRule:
    return AlertRule.model_validate({"displayName": "r", "channels": ["c"], **fields})


def test_an_empty_rule_matches_every_event_from_warning_up() -> None:
    assert matches(rule(), make_event("r1", severity=Severity.WARNING), RUN)
    assert matches(rule(), make_event("r1", severity=Severity.CRITICAL), RUN)
    assert not matches(rule(), make_event("r1", severity=Severity.INFO), RUN)
    assert matches(rule(minSeverity="INFO"), make_event("r1", severity=Severity.INFO), RUN)


def test_severity_is_ordered_info_warning_critical() -> None:
    critical_only = rule(minSeverity="CRITICAL")
    assert not matches(critical_only, make_event("r1", severity=Severity.WARNING), RUN)
    assert matches(critical_only, make_event("r1", severity=Severity.CRITICAL), RUN)


def test_event_types_run_sets_and_labels_must_all_hold() -> None:
    hang = make_event("r1", event_type=EventType.HANG)
    assert matches(rule(eventTypes=["HANG", "STRAGGLER"]), hang, RUN)
    assert not matches(rule(eventTypes=["STRAGGLER"]), hang, RUN)
    assert matches(rule(runSets=["nightly"]), hang, RUN)
    assert not matches(rule(runSets=["weekly"]), hang, RUN)
    assert matches(rule(labels={"team": "a"}), hang, RUN)
    assert matches(rule(labels={"team": "a", "tier": "1"}), hang, RUN)
    assert not matches(rule(labels={"team": "a", "tier": "2"}), hang, RUN)
    assert not matches(rule(labels={"owner": "x"}), hang, RUN)
    assert not matches(rule(eventTypes=["HANG"], runSets=["weekly"]), hang, RUN)


def test_a_disabled_rule_routes_nothing() -> None:
    assert not matches(rule(enabled=False), make_event("r1"), RUN)


def test_delivery_ids_are_stable_and_distinct_per_kind_rule_and_channel() -> None:
    event = uuid.UUID(int=7)
    first = delivery_id(event, NotificationKind.OPENED, "rule", "chan")
    assert first == delivery_id(event, NotificationKind.OPENED, "rule", "chan")
    others = {
        delivery_id(event, NotificationKind.RESOLVED, "rule", "chan"),
        delivery_id(event, NotificationKind.OPENED, "other", "chan"),
        delivery_id(event, NotificationKind.OPENED, "rule", "other"),
        delivery_id(uuid.UUID(int=8), NotificationKind.OPENED, "rule", "chan"),
        group_delivery_id(first),
    }
    assert first not in others
    assert len(others) == 5


@pytest.mark.parametrize(
    ("failures", "wait"), [(1, 1.0), (2, 2.0), (3, 4.0), (8, 128.0), (9, 256.0), (10, 300.0)]
)
def test_backoff_doubles_from_one_second_up_to_five_minutes(failures: int, wait: float) -> None:
    assert backoff_seconds(failures, 1.0, 300.0) == wait


def test_backoff_never_overflows() -> None:
    assert backoff_seconds(10_000, 1.0, 300.0) == 300.0

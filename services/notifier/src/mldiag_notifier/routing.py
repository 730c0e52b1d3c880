"""Which rules an event matches, the ids of its deliveries, and the wait between attempts:
pure decisions, no I/O."""

import uuid
from dataclasses import dataclass, field

from mldiag_schemas.alerts import AlertRule, NotificationKind
from mldiag_schemas.events import Severity, WorkloadEvent

DELIVERY_NAMESPACE = uuid.UUID("3f0c8a52-6a0e-4f57-9d7e-2b1c5e8d4a71")
"""uuid5 namespace of delivery ids (fixed: the same event, kind, rule and channel always give
the same id, whichever replica decides it)."""

SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
"""INFO < WARNING < CRITICAL."""


@dataclass(frozen=True)
class RunFacts:
    """What the notifier knows of a run: where it lives and what rules match on."""

    run_id: str
    project: str
    location: str
    name: str = ""
    display_name: str = ""
    run_set: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def matches(rule: AlertRule, event: WorkloadEvent, run: RunFacts) -> bool:
    """Whether ``rule`` routes ``event`` of ``run``: enabled, and every criterion it sets
    holds (type, least severity, run set, labels all equal)."""
    return (
        rule.enabled
        and (not rule.event_types or event.type in rule.event_types)
        and SEVERITY_RANK[event.severity] >= SEVERITY_RANK[rule.min_severity]
        and (not rule.run_sets or run.run_set in rule.run_sets)
        and all(run.labels.get(key) == value for key, value in rule.labels.items())
    )


def delivery_id(event_id: uuid.UUID, kind: NotificationKind, rule: str, channel: str) -> uuid.UUID:
    """The id of the delivery of ``event_id``'s ``kind`` notification by ``rule`` to
    ``channel``: its primary key, so deciding it twice stores it once."""
    return uuid.uuid5(DELIVERY_NAMESPACE, f"{event_id}/{kind.value}/{rule}/{channel}")


def group_delivery_id(leader: uuid.UUID) -> uuid.UUID:
    """The id of the grouped notification of the window opened by delivery ``leader``."""
    return uuid.uuid5(DELIVERY_NAMESPACE, f"{leader}/group")


def backoff_seconds(failed_attempts: int, base: float, cap: float) -> float:
    """The wait after ``failed_attempts`` failures: base, 2·base, 4·base … at most ``cap``."""
    exponent = min(max(failed_attempts - 1, 0), 60)  # 2**60 s is past any cap
    return float(min(base * 2.0**exponent, cap))

"""Rule overrides: checking them, and a project's own set (no SQL, no bus client here).

A project's overrides replace each other whole (PATCH is a replace) and are announced as
``MonitoringRulesChanged`` through the outbox, after the commit; the event-detector resolves
``run override → project override → default`` per threshold.
"""

import math
from datetime import UTC, datetime

import structlog

from mldiag_platform.outbox import Flusher
from mldiag_run_registry.monitoring.errors import InvalidMonitoringRules
from mldiag_run_registry.monitoring.repository import MonitoringRepository
from mldiag_schemas.monitoring import (
    MonitoringRules,
    MonitoringRulesChanged,
    ProjectMonitoringRules,
    unknown_thresholds,
)

log = structlog.get_logger(__name__)


def rules_name(project: str, location: str) -> str:
    """The resource name of a project's overrides."""
    return f"projects/{project}/locations/{location}/monitoringRules"


def check_rules(rules: MonitoringRules) -> None:
    """Refuse thresholds a rule does not have, and negative or non-finite values."""
    problems = [
        {"field": f"{name}.{threshold}", "problem": "the rule has no such threshold"}
        for name, threshold in (item.split(".", 1) for item in unknown_thresholds(rules))
    ]
    problems += [
        {"field": f"{name}.{threshold}", "problem": f"must be a finite number >= 0, got {value}"}
        for name, override in rules.rules.items()
        for threshold, value in override.thresholds.items()
        if not math.isfinite(value) or value < 0
    ]
    if problems:
        fields = ", ".join(problem["field"] for problem in problems)
        raise InvalidMonitoringRules(
            f"invalid rule overrides: {fields} (see docs/monitoring.md for each rule's thresholds)",
            details=problems,
        )


class MonitoringService:
    """A project's rule overrides."""

    def __init__(self, repository: MonitoringRepository, outbox: Flusher) -> None:
        self._repository = repository
        self._outbox = outbox

    async def get_rules(self, project: str, location: str) -> ProjectMonitoringRules:
        """The project's overrides (none set: no overrides)."""
        rules = await self._repository.get_rules(project, location) or MonitoringRules()
        return ProjectMonitoringRules(name=rules_name(project, location), rules=rules.rules)

    async def replace_rules(
        self, project: str, location: str, body: ProjectMonitoringRules
    ) -> ProjectMonitoringRules:
        """Replace the project's overrides and announce them once committed."""
        rules = MonitoringRules(rules=body.rules)
        check_rules(rules)
        now = datetime.now(UTC)
        changed = MonitoringRulesChanged(
            occurred_at=now, project=project, location=location, rules=rules
        )
        await self._repository.replace_rules(project, location, rules, now, [changed])
        await self._outbox.flush()
        log.info(
            "monitoring.rules_replaced",
            project=project,
            location=location,
            rules=",".join(sorted(rules.rules)),
        )
        return ProjectMonitoringRules(name=rules_name(project, location), rules=rules.rules)

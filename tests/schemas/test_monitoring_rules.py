"""The rule catalogue: documented as it is, and overrides validated against it."""

from pathlib import Path

from mldiag_schemas.events import EventType
from mldiag_schemas.monitoring import (
    RULES,
    MonitoringRules,
    RuleName,
    RuleOverride,
    unknown_thresholds,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def test_every_rule_and_default_is_in_the_docs() -> None:
    text = DOCS.read_text()
    for spec in RULES.values():
        row = next(
            line for line in text.splitlines() if line.startswith(f"| `{spec.name.value}` |")
        )
        assert spec.event_type in row
        for name, threshold in spec.thresholds.items():
            assert f"`{name}` = {threshold.default:g}" in row


def test_every_rule_opens_a_known_event_type() -> None:
    assert {spec.event_type for spec in RULES.values()} <= set(EventType)
    assert set(EventType) <= {spec.event_type for spec in RULES.values()}


def test_unknown_thresholds_are_named() -> None:
    rules = MonitoringRules(
        rules={
            RuleName.HANG: RuleOverride(thresholds={"floorSeconds": 60, "floor": 1}),
            RuleName.TERMINATION: RuleOverride(enabled=False),
        }
    )
    assert unknown_thresholds(rules) == ["hang.floor"]

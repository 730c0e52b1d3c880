"""Errors about rule overrides."""

from mldiag_platform.errors import InvalidArgument


class InvalidMonitoringRules(InvalidArgument):
    """Rule overrides name a rule or threshold that does not exist, or set a threshold to a
    negative or non-finite value (details: the offending ``rule.threshold``)."""

    code = "invalid_monitoring_rules"

"""The notifier's tables, one module each: the runs read model, channels, rules, analyses and
deliveries (the only modules with SQL).

One class, :class:`NotifierRepository`, holds them all on one pool; how deliveries are
decided and claimed under locks is told in :mod:`mldiag_notifier.repository.deliveries`.
"""

from mldiag_notifier.repository.analyses import AnalysesTable
from mldiag_notifier.repository.channels import ChannelsTable, StoredChannel, channel_name
from mldiag_notifier.repository.deliveries import (
    DELIVERY_COLUMNS,
    GROUPED,
    RATE_LIMITED,
    DeliveriesTable,
    DeliveryRow,
    Plan,
    delivery_name,
)
from mldiag_notifier.repository.rules import RulesTable, rule_name
from mldiag_notifier.repository.runs import RunsTable

__all__ = [
    "DELIVERY_COLUMNS",
    "GROUPED",
    "RATE_LIMITED",
    "DeliveryRow",
    "NotifierRepository",
    "Plan",
    "StoredChannel",
    "channel_name",
    "delivery_name",
    "rule_name",
]


class NotifierRepository(RunsTable, ChannelsTable, RulesTable, AnalysesTable, DeliveriesTable):
    """Every query of the notifier, on one pool."""

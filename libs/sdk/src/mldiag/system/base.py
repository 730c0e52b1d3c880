"""What every source produces: a sample, keyed by metric name and labels."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

logger = logging.getLogger("mldiag")

Labels = tuple[tuple[str, str], ...]
"""Labels of one series as (name, value) pairs, for series that need more than a device."""

Sample = dict[tuple[str, str | Labels], float]
"""(metric name, device label or "" or :data:`Labels`) → value."""

Record = Callable[[Sample], None]
Source = Callable[[], Sample]
Finder = Callable[[], Source | None]
"""Starts a source, or returns None where it cannot measure anything."""


def start_sources(finders: Iterable[Finder]) -> list[Source]:
    """Start each source that can measure something here; one that fails to start is
    skipped with a warning, never raised (the sampler and the agent alike)."""
    sources: list[Source] = []
    for find in finders:
        try:
            source = find()
        except Exception:
            logger.warning("mldiag.system.source_unavailable", exc_info=True)
            continue
        if source is not None:
            sources.append(source)
    return sources


def point_labels(label: str | Labels) -> dict[str, str] | None:
    """The labels of a sample's key: a device label, the pairs given, or none."""
    if isinstance(label, str):
        return {"device": label} if label else None
    return dict(label)


def by_labels(sample: Sample) -> list[tuple[dict[str, str] | None, dict[str, float]]]:
    """A sample's values grouped by their labels (one group per device, process, ...)."""
    groups: dict[str | Labels, dict[str, float]] = {}
    for (name, label), value in sample.items():
        groups.setdefault(label, {})[name] = value
    return [(point_labels(label), values) for label, values in groups.items()]

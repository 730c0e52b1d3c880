"""What an importer reads from a source, in the platform's terms: runs with their configs,
labels and metric points. Readers produce these; :mod:`mldiag.imports.writer` sends them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

_METRIC_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./:-]{0,199}$")
# Kept equal to mldiag_schemas.telemetry.METRIC_NAME_PATTERN (the SDK depends on httpx only).
_METRIC_BAD_CHAR = re.compile(r"[^A-Za-z0-9_./:-]")
_LABEL_BAD_CHAR = re.compile(r"[^a-z0-9_-]")
_RUN_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")  # mldiag_schemas.ids

MAX_RUN_LABELS = 64
"""The registry's bound on a run's labels."""

MAX_LABEL_KEY_LENGTH = 63
"""Label keys are cut to this length (Google Cloud's label rule, so filters read them)."""

MAX_LABEL_VALUE_LENGTH = 256
"""Label values are cut to this length: labels are for filtering, not for documents."""


@dataclass(frozen=True, slots=True)
class Point:
    """One metric value at one step, with its wall time (seconds since the epoch)."""

    step: int
    value: float
    time: float


@dataclass(slots=True)
class SourceRun:
    """One run read from a source, ready to be written to the platform.

    ``run_id`` is derived from the source alone, so importing the same source again
    addresses the same run. ``metrics`` maps each (platform-valid) metric name to its points
    in the order the source holds them. ``skipped`` counts what the reader left out, by kind.
    """

    run_id: str
    display_name: str
    run_set: str
    labels: dict[str, str] = field(default_factory=dict)
    user_configs: dict[str, Any] = field(default_factory=dict)
    software_configs: dict[str, Any] = field(default_factory=dict)
    phase: str = "COMPLETED"
    metrics: dict[str, list[Point]] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def skip(self, kind: str, count: int = 1) -> None:
        """Count ``count`` things of ``kind`` the reader did not import."""
        self.skipped[kind] = self.skipped.get(kind, 0) + count

    @property
    def point_count(self) -> int:
        """How many points the run holds, all metrics together."""
        return sum(len(points) for points in self.metrics.values())


def derived_run_id(prefix: str, *parts: str) -> str:
    """``<prefix>-<16 hex digits of a hash of parts>``: a valid run id, the same each time."""
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]
    return f"{prefix}-{digest}"


def readable_run_id(prefix: str, source_id: str) -> str:
    """``<prefix>-<source_id>`` when that is a valid run id (lowercase letters, digits,
    ``-``, at most 63 characters), else :func:`derived_run_id` of it."""
    candidate = f"{prefix}-{source_id.lower()}"
    if _RUN_ID_RE.fullmatch(candidate):
        return candidate
    return derived_run_id(prefix, source_id)


def metric_name(tag: str) -> str:
    """A metric name the platform accepts for a source's tag or key: characters outside
    ``A-Za-z0-9_./:-`` become ``_``, a name that does not start with a letter or ``_`` gets
    a ``_`` in front, and it is cut to 200 characters."""
    if _METRIC_NAME_RE.fullmatch(tag):
        return tag
    name = _METRIC_BAD_CHAR.sub("_", tag) or "_"
    if not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")):
        name = "_" + name
    return name[:200]


def label_key(key: str) -> str:
    """A label key that run filters can name: lowercase, ``[a-z0-9_-]`` (others become
    ``_``), starting with a letter (else ``k_`` in front), at most 63 characters."""
    name = _LABEL_BAD_CHAR.sub("_", key.lower()) or "k"
    if not ("a" <= name[0] <= "z"):
        name = "k_" + name
    return name[:MAX_LABEL_KEY_LENGTH]


def label_value(value: str) -> str:
    """A label value the registry stores: NUL removed, at most 256 characters."""
    return value.replace("\x00", "")[:MAX_LABEL_VALUE_LENGTH]

"""Comparing two runs' configs: nested dicts flattened to dotted keys, then set arithmetic."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

CONFIG_SECTIONS: tuple[str, ...] = ("softwareConfigs", "hardwareConfigs", "userConfigs")
"""The parts of a run's ``configs`` that ``mldiag configs diff`` compares."""

Change = Literal["added", "removed", "changed"]
"""How a key differs: only in the second run, only in the first, or in both with new value."""


@dataclass(frozen=True, slots=True)
class ConfigDifference:
    """One dotted key whose value differs between run A and run B."""

    key: str
    """Dotted key, section first (``userConfigs.optimizer.lr``)."""
    change: Change
    """What kind of difference."""
    a: Any = None
    """The value in run A (``None`` when added)."""
    b: Any = None
    """The value in run B (``None`` when removed)."""

    def as_json(self) -> dict[str, Any]:
        """The difference as a JSON object (``a``/``b`` left out where the run lacks the key)."""
        data: dict[str, Any] = {"key": self.key, "change": self.change}
        if self.change != "added":
            data["a"] = self.a
        if self.change != "removed":
            data["b"] = self.b
        return data


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys; lists and scalars are leaves.

    An empty dict stays a leaf (``{}``) so that its presence is not lost.
    """
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def flatten_configs(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run's compared config sections flattened, each key prefixed with its section."""
    configs = run.get("configs") or {}
    flat: dict[str, Any] = {}
    for section in CONFIG_SECTIONS:
        values = configs.get(section) or {}
        if isinstance(values, Mapping):
            flat.update(flatten(values, section))
    return flat


def _same(a: Any, b: Any) -> bool:
    # Compared as JSON so NaN equals NaN and 1 differs from true; 1 and 1.0 stay equal.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) or (
        type(a) in (int, float) and type(b) in (int, float) and a == b
    )


def diff_flat(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[ConfigDifference]:
    """The keys that differ between two flat mappings, sorted by key."""
    differences = []
    for key in sorted(a.keys() | b.keys()):
        if key not in b:
            differences.append(ConfigDifference(key, "removed", a=a[key]))
        elif key not in a:
            differences.append(ConfigDifference(key, "added", b=b[key]))
        elif not _same(a[key], b[key]):
            differences.append(ConfigDifference(key, "changed", a=a[key], b=b[key]))
    return differences


def diff_configs(run_a: Mapping[str, Any], run_b: Mapping[str, Any]) -> list[ConfigDifference]:
    """How run B's software, hardware and user configs differ from run A's."""
    return diff_flat(flatten_configs(run_a), flatten_configs(run_b))

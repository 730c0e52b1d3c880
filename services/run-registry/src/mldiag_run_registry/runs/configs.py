"""A run's configs as data: flattening for display, diffing two runs, merging a report
(pure functions: no I/O here).

Flattening turns nested objects into dotted keys; lists and scalars are leaves, and an empty
object stays a leaf (``{}``) so that its presence is not lost.
"""

import json
import math
from collections.abc import Iterator, Mapping
from typing import Literal, TypeGuard, get_args

from pydantic import JsonValue

from mldiag_schemas.runs import (
    ConfigChange,
    ConfigDifference,
    ConfigEntry,
    Configs,
)

Section = Literal["softwareConfigs", "hardwareConfigs", "userConfigs"]
SECTIONS: tuple[Section, ...] = get_args(Section)
_ATTRIBUTE = {
    "softwareConfigs": "software_configs",
    "hardwareConfigs": "hardware_configs",
    "userConfigs": "user_configs",
}


def _section(configs: Configs, section: Section) -> dict[str, JsonValue]:
    values: dict[str, JsonValue] = getattr(configs, _ATTRIBUTE[section])
    return values


def flatten(data: Mapping[str, JsonValue], prefix: str = "") -> Iterator[tuple[str, JsonValue]]:
    """(dotted key, leaf) of every leaf, in the mapping's order."""
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from flatten(value, name)
        else:
            yield name, value


def flat_entries(configs: Configs) -> list[ConfigEntry]:
    """Every leaf of every section, sorted by section then key."""
    return [
        ConfigEntry(section=section, key=key, value=value)
        for section in SECTIONS
        for key, value in sorted(flatten(_section(configs, section)))
    ]


def same_value(a: JsonValue, b: JsonValue) -> bool:
    """Equal as configs: numbers by value (1 == 1.0, NaN == NaN), but true is not 1."""
    if _is_number(a) and _is_number(b):
        return a == b or (math.isnan(a) and math.isnan(b))
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _is_number(value: JsonValue) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def diff(base: Configs, other: Configs, *, include_unchanged: bool) -> list[ConfigDifference]:
    """How ``other`` differs from ``base``, key by flattened key, sorted."""
    differences: list[ConfigDifference] = []
    for section in SECTIONS:
        before = dict(flatten(_section(base, section)))
        after = dict(flatten(_section(other, section)))
        for key in sorted(before.keys() | after.keys()):
            if key not in after:
                change, old, new = ConfigChange.REMOVED, before[key], None
            elif key not in before:
                change, old, new = ConfigChange.ADDED, None, after[key]
            else:
                old, new = before[key], after[key]
                change = ConfigChange.UNCHANGED if same_value(old, new) else ConfigChange.CHANGED
            if change is not ConfigChange.UNCHANGED or include_unchanged:
                differences.append(
                    ConfigDifference(
                        section=section, key=key, change=change, base_value=old, other_value=new
                    )
                )
    return differences


def merged(current: Configs, reported: Configs) -> Configs:
    """``current`` with each reported section's keys laid over it (top-level keys replace)."""
    update = {
        _ATTRIBUTE[section]: {**_section(current, section), **_section(reported, section)}
        for section in SECTIONS
        if _section(reported, section)
    }
    return current.model_copy(update=update)


def changed_sections(before: Configs, after: Configs) -> list[str]:
    """The snake_case update-mask paths (``configs.user_configs``, ...) that differ."""
    return [
        f"configs.{_ATTRIBUTE[section]}"
        for section in SECTIONS
        if not _equal(_section(before, section), _section(after, section))
    ]


def _equal(a: dict[str, JsonValue], b: dict[str, JsonValue]) -> bool:
    # JSON text, so NaN equals NaN and 1 differs from true
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

"""A run's configs as data: flattening, diffing and merging (pure, no I/O)."""

import math

from mldiag_run_registry.runs.configs import (
    changed_sections,
    diff,
    flat_entries,
    flatten,
    merged,
    same_value,
)
from mldiag_schemas.runs import ConfigChange, Configs


def test_flatten_dots_nested_keys_and_keeps_lists_and_empty_maps_as_leaves() -> None:
    data = {"optimizer": {"name": "adam", "betas": [0.9, 0.99]}, "mesh": {}, "seed": 1}
    assert list(flatten(data)) == [
        ("optimizer.name", "adam"),
        ("optimizer.betas", [0.9, 0.99]),
        ("mesh", {}),
        ("seed", 1),
    ]


def test_flat_entries_are_sorted_by_section_then_key_and_stay_typed() -> None:
    configs = Configs(
        user_configs={"lr": 0.1, "batch": {"size": 32}},
        software_configs={"framework": "jax"},
    )
    entries = [(e.section, e.key, e.value) for e in flat_entries(configs)]
    assert entries == [
        ("softwareConfigs", "framework", "jax"),
        ("userConfigs", "batch.size", 32),
        ("userConfigs", "lr", 0.1),
    ]


def test_numbers_compare_by_value_but_booleans_are_not_numbers() -> None:
    assert same_value(1, 1.0)
    assert same_value(math.nan, math.nan)
    assert not same_value(True, 1)
    assert not same_value("1", 1)
    assert same_value({"a": [1, 2]}, {"a": [1, 2]})


def test_diff_names_each_change_and_hides_unchanged_keys_unless_asked() -> None:
    base = Configs(user_configs={"lr": 0.1, "seed": 1, "opt": {"name": "adam"}})
    other = Configs(user_configs={"lr": 0.2, "seed": 1.0, "steps": 100})
    changes = [
        (d.key, d.change, d.base_value, d.other_value)
        for d in diff(base, other, include_unchanged=False)
    ]
    assert changes == [
        ("lr", ConfigChange.CHANGED, 0.1, 0.2),
        ("opt.name", ConfigChange.REMOVED, "adam", None),
        ("steps", ConfigChange.ADDED, None, 100),
    ]
    everything = diff(base, other, include_unchanged=True)
    assert [(d.key, d.change) for d in everything if d.key == "seed"] == [
        ("seed", ConfigChange.UNCHANGED)
    ]


def test_merging_a_report_lays_its_top_level_keys_over_the_run() -> None:
    current = Configs(
        user_configs={"lr": 0.1, "opt": {"name": "adam", "eps": 1e-8}},
        hardware_configs={"device_count": 8},
    )
    report = Configs(user_configs={"opt": {"name": "sgd"}, "steps": 10})
    after = merged(current, report)
    assert after.user_configs == {"lr": 0.1, "opt": {"name": "sgd"}, "steps": 10}
    assert after.hardware_configs == {"device_count": 8}
    assert changed_sections(current, after) == ["configs.user_configs"]
    assert changed_sections(after, merged(after, report)) == []  # applied twice: no change
